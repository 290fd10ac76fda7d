"""Where csctl finds the server: --server, then $CSCTL_SERVER, then the config file."""

from __future__ import annotations

from pathlib import Path

import pytest
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance.client import DEFAULT_ADDRESS
from csctl.config import ConfigError, config_path, resolve_server


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
