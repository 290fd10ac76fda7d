"""Runs csctl in-process with click's CliRunner."""

from __future__ import annotations

from click.testing import CliRunner, Result

from csctl.cli import cli


class Csctl:
    """csctl against one server address (`--server`), or with no flag when address is None."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        flag = ["--server", self.address] if self.address else []
        return CliRunner().invoke(cli, [*flag, *args], env=env)
