"""Where csctl finds the server and the token: flag, then environment, then the config file
(written private, with a warning when a file holding a token is not)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance.client import DEFAULT_ADDRESS
from appliance.client.user_config import ConfigError, config_path, resolve_server
from csctl.cli import cli


def test_flag_beats_env_beats_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("server: file-host:3\n")
    env = {"CSCTL_CONFIG": str(config), "CSCTL_SERVER": "env-host:2"}

    assert resolve_server("flag-host:1", env).address == "flag-host:1"
    assert resolve_server(None, env).address == "env-host:2"
    assert resolve_server(None, {"CSCTL_CONFIG": str(config)}).address == "file-host:3"
    assert resolve_server(None, {"XDG_CONFIG_HOME": str(tmp_path)}).address == DEFAULT_ADDRESS


def test_default_config_file_location(tmp_path: Path) -> None:
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "csctl/config.yaml"
    assert config_path({}) == Path.home() / ".config/csctl/config.yaml"


@pytest.mark.parametrize(
    ("content", "problem"),
    [("server: [\n", "not valid YAML"), ("- a\n", "YAML mapping"), ("server: 5\n", "string")],
)
def test_bad_config_files_are_explained(tmp_path: Path, content: str, problem: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(content)

    with pytest.raises(ConfigError, match=problem):
        resolve_server(None, {"CSCTL_CONFIG": str(config)})


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_server(None, {"CSCTL_CONFIG": str(tmp_path / "missing.yaml")})


def test_address_must_be_host_and_port() -> None:
    with pytest.raises(ConfigError, match="host:port"):
        resolve_server("localhost", {})


def test_cli_uses_the_same_precedence(
    cluster: FakeCluster, dead_address: str, config_file: Path
) -> None:
    no_flag = Csctl(None)
    config_file.write_text(f"server: {cluster.address}\n")
    from_file = no_flag("version")
    from_env = no_flag("version", env={"CSCTL_SERVER": dead_address})
    from_flag = Csctl(cluster.address)("version", env={"CSCTL_SERVER": dead_address})

    assert from_file.exit_code == 0 and cluster.address in from_file.stdout
    assert from_env.exit_code == 1 and dead_address in from_env.stderr
    assert from_flag.exit_code == 0 and cluster.address in from_flag.stdout


def test_a_bad_config_file_is_exit_2_with_one_line(config_file: Path) -> None:
    config_file.write_text("server: nonsense\n")

    result = Csctl(None)("get", "jobs")

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: server address 'nonsense' from config file {config_file} must be host:port\n"
    )


def test_config_set_token_writes_a_private_file_and_view_redacts_it(
    config_file: Path, cluster: FakeCluster
) -> None:
    config_file.write_text(f"server: {cluster.address}\n")
    config_file.chmod(0o644)
    csctl = Csctl(None)

    written = csctl("config", "set", "token", "s3cr3t-t0ken")
    viewed = csctl("config", "view")

    assert written.exit_code == 0, written.output
    assert written.stdout == f"token: REDACTED written to {config_file}\n"
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert yaml.safe_load(config_file.read_text()) == {
        "server": cluster.address,
        "token": "s3cr3t-t0ken",
    }
    assert viewed.exit_code == 0 and viewed.stderr == ""
    assert "s3cr3t" not in viewed.output
    assert yaml.safe_load(viewed.stdout)["settings"] == {
        "server": cluster.address,
        "token": "REDACTED",
    }
    assert csctl("version").stderr == ""  # a private file: no warning


def test_config_set_writes_mode_0600_even_for_a_new_file_and_directory(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "config.yaml"

    set_by_stdin = CliRunner().invoke(
        cli, ["config", "set", "token", "-"], input="from-stdin\n", env={"CSCTL_CONFIG": str(path)}
    )
    set_server = Csctl(None)("config", "set", "server", "h:1", env={"CSCTL_CONFIG": str(path)})

    assert set_by_stdin.exit_code == 0 and set_server.exit_code == 0
    assert "from-stdin" not in set_by_stdin.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert yaml.safe_load(path.read_text()) == {"token": "from-stdin", "server": "h:1"}


def test_a_token_in_a_file_others_can_read_is_warned_about(
    config_file: Path, cluster: FakeCluster
) -> None:
    config_file.write_text(f"server: {cluster.address}\ntoken: abc\n")
    csctl = Csctl(None)

    warnings = {}
    for mode in (0o644, 0o640, 0o604, 0o600):
        config_file.chmod(mode)
        result = csctl("version")
        assert result.exit_code == 0, result.output
        warnings[mode] = result.stderr

    assert warnings[0o600] == ""
    assert warnings[0o644] == (
        f"warning: config file {config_file} holds a token and can be read by its group and "
        f"others (mode 0644); run `chmod 600 {config_file}`\n"
    )
    assert "read by its group (mode 0640)" in warnings[0o640]
    assert "read by others (mode 0604)" in warnings[0o604]
    config_file.chmod(0o644)
    assert "holds a token" in csctl("config", "view").stderr
    assert csctl("version", env={"CSCTL_TOKEN": "env"}).stderr == ""  # the file's token unused
    config_file.write_text(f"server: {cluster.address}\n")
    assert csctl("version").stderr == ""  # no token in the file: nothing to protect


def test_config_set_token_refuses_a_token_with_spaces(config_file: Path) -> None:
    result = Csctl(None)("config", "set", "token", "two words")

    assert result.exit_code == 2
    assert result.stderr == "error: a token is one word of printable characters, with no spaces\n"
    assert config_file.read_text() == ""
