"""Every command explains itself with an example; `csctl config view|set`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from csctl.cli import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", _commands(cli), ids=lambda path: " ".join(path) or "csctl")
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = Csctl(None)(*path, "--help")

    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout


def test_help_lists_each_group_once_and_node_still_works() -> None:
    listing = Csctl(None)("--help").stdout.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    names = [line.split()[0] for line in listing.splitlines() if not line.startswith("    ")]
    assert len(names) == len(set(names)) and "system" in names and "node" not in names
    assert "alias: node" in listing
    assert Csctl(None)("node", "set-state", "--help").exit_code == 0


def test_help_documents_shell_completion() -> None:
    assert 'eval "$(csctl completion bash)"' in Csctl(None)("--help").stdout


def test_completion_script_comes_from_click() -> None:
    csctl = Path(sys.executable).parent / "csctl"
    env = {**os.environ, "_CSCTL_COMPLETE": "bash_source"}

    result = subprocess.run([csctl], env=env, capture_output=True, text=True, timeout=30)

    assert result.returncode == 0
    assert "_csctl_completion" in result.stdout


def test_config_set_server_writes_the_file_and_view_shows_it(
    config_file: Path, cluster: FakeCluster
) -> None:
    config_file.write_text("other: kept\n")
    csctl = Csctl(None)

    written = csctl("config", "set", "server", cluster.address)
    viewed = csctl("config", "view")

    assert written.exit_code == 0, written.output
    assert yaml.safe_load(config_file.read_text()) == {"other": "kept", "server": cluster.address}
    document = yaml.safe_load(viewed.stdout)
    assert document["server"] == cluster.address
    assert document["server_from"] == f"config file {config_file}"
    assert csctl("version").exit_code == 0
    assert Csctl("127.0.0.1:1")("config", "view").stdout.count("--server") == 1


def test_config_set_refuses_a_bad_address_or_key(config_file: Path) -> None:
    bad = Csctl(None)("config", "set", "server", "nonsense")

    assert bad.exit_code == 2
    assert bad.stderr == (
        "error: server address 'nonsense' from the command line must be host:port\n"
    )
    assert config_file.read_text() == ""
    assert Csctl(None)("config", "set", "colour", "x").exit_code == 2
