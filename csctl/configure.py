"""`csctl config view` and `csctl config set server HOST:PORT`: the csctl config file."""

from __future__ import annotations

import os

import click

from csctl import render
from csctl.config import ENV_SERVER, ConfigError, config_path, read_config, set_server
from csctl.session import CsctlConfigError, Session

SETTABLE = ("server",)


@click.group()
def config() -> None:
    """Show or change csctl's settings.

    The server is taken from --server, else $CSCTL_SERVER, else `server:` in the config file
    ($CSCTL_CONFIG, else $XDG_CONFIG_HOME/csctl/config.yaml, else ~/.config/csctl/config.yaml).

    \b
    Examples:
      csctl config view
      csctl config set server coordinator:50051
    """


@config.command("view")
@click.pass_obj
def view(session: Session) -> None:
    """Show the config file, its settings and the server csctl would use (and why).

    \b
    Example:
      csctl config view
    """
    path = config_path(os.environ)
    try:
        settings = read_config(path, required=False)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    server = session.server
    document = {
        "config_file": str(path),
        "exists": path.exists(),
        "settings": settings,
        "server": server.address,
        "server_from": server.source,
    }
    click.echo(render.to_yaml(document))


@config.command("set")
@click.argument("key", type=click.Choice(SETTABLE))
@click.argument("value")
def set_(key: str, value: str) -> None:
    """Write a setting into the config file (created if absent; other keys are kept).

    \b
    Example:
      csctl config set server coordinator:50051
    """
    path = config_path(os.environ)
    try:
        address = set_server(path, value)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    click.echo(f"{key}: {address} written to {path}")
    if os.environ.get(ENV_SERVER):
        click.echo(f"note: ${ENV_SERVER} is set and takes precedence over the file", err=True)
