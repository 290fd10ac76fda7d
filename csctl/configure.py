"""`csctl config view` and `csctl config set server|token VALUE`: the csctl config file."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from appliance.client.client_identity import resolve_identity
from appliance.client.tls import resolve_trust
from appliance.client.user_config import (
    ENV_SERVER,
    ENV_TOKEN,
    SETTABLE,
    ConfigError,
    config_path,
    current_cluster,
    exposure_warning,
    read_config,
    redacted,
    set_cluster,
    set_setting,
    use_cluster,
)
from csctl import render
from csctl.render import say
from csctl.session import CsctlConfigError, Session

_OVERRIDDEN_BY = {"server": ENV_SERVER, "token": ENV_TOKEN}


@click.group()
def config() -> None:
    """Show or change csctl's settings.

    The server is taken from --server, else $CSCTL_SERVER, else `server:` in the config file
    ($CSCTL_CONFIG, else $XDG_CONFIG_HOME/csctl/config.yaml, else ~/.config/csctl/config.yaml);
    the token likewise from --token, $CSCTL_TOKEN, then `token:`. The file is written readable
    by you only (mode 0600); csctl warns when a file holding a token is readable by others.

    \b
    Examples:
      csctl config view
      csctl config set server coordinator:50051
      csctl config set token -        # reads the token from stdin, not the command line
      csctl config set-cluster lab --server coordinator:50051 --certificate-authority ca.crt
      csctl config use-cluster lab
    """


@config.command("view")
@click.pass_obj
def view(session: Session) -> None:
    """Show the config file, its settings (a token redacted) and the server csctl would use
    (and why).

    \b
    Example:
      csctl config view
    """
    path = config_path(os.environ)
    try:
        settings = read_config(path, required=False)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    if settings.get("token"):
        warning = exposure_warning(path)
        if warning:
            say(warning, err=True)
    server = session.server
    document = {
        "config_file": str(path),
        "exists": path.exists(),
        "settings": redacted(settings),
        "server": server.address,
        "server_from": server.source,
    }
    say(render.to_yaml(document))


@config.command("set")
@click.argument("key", type=click.Choice(SETTABLE))
@click.argument("value")
def set_(key: str, value: str) -> None:
    """Write a setting into the config file (created if absent; other keys are kept). The file
    is written readable by you only (mode 0600). A token given as `-` is read from stdin, so
    it stays out of your shell history.

    \b
    Examples:
      csctl config set server coordinator:50051
      csctl config set token -
    """
    path = config_path(os.environ)
    if key == "token" and value == "-":
        value = sys.stdin.readline()
    try:
        written = set_setting(path, key, value)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    shown = redacted({key: written})[key]
    say(f"{key}: {shown} written to {path}")
    if os.environ.get(_OVERRIDDEN_BY[key]):
        say(f"note: ${_OVERRIDDEN_BY[key]} is set and takes precedence over the file", err=True)


F = TypeVar("F", bound=Callable[..., Any])


def _file_option(flag: str, help: str) -> Callable[[F], F]:
    return click.option(
        flag, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help=help
    )


@config.command("set-cluster")
@click.argument("name")
@click.option("--server", metavar="HOST:PORT", help="The appliance's gRPC address.")
@click.option(
    "--certificate-authority",
    "certificate_authority",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="PEM CA its certificate chains to (`appliance serve` prints the path).",
)
@click.option(
    "--insecure/--no-insecure",
    default=None,
    help="Plaintext to a loopback server started with --insecure.",
)
@_file_option(
    "--client-certificate", "PEM certificate to present (mutual TLS), with --client-key."
)
@_file_option("--client-key", "PEM key of --client-certificate (mode 0600).")
def set_cluster_(
    name: str,
    server: str | None,
    certificate_authority: Path | None,
    insecure: bool | None,
    client_certificate: Path | None,
    client_key: Path | None,
) -> None:
    """Add or change a cluster: a server and the CA its certificate must chain to (as the real
    csctl and kubectl keep them), and the client certificate to present to a server that
    requires one. The first cluster added becomes the current one.

    \b
    Examples:
      csctl config set-cluster lab --server coordinator:50051 --certificate-authority ca.crt
      csctl config set-cluster lab --client-certificate me.crt --client-key me.key
      csctl config use-cluster lab
    """
    path = config_path(os.environ)
    try:
        if certificate_authority is not None:  # refuse a file that is not a CA now, not later
            resolve_trust(certificate_authority, None, {})
        if client_certificate is not None or client_key is not None:  # and half a pair
            resolve_identity(client_certificate, client_key, {})
        client = (client_certificate, client_key) if client_certificate and client_key else None
        cluster = set_cluster(path, name, server, certificate_authority, insecure, client)
        current = current_cluster(os.environ)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    trust = "plaintext" if cluster.insecure else cluster.certificate_authority or "system CAs"
    presenting = f", presenting {cluster.client_certificate}" if cluster.client_certificate else ""
    say(
        f"cluster {name}: {cluster.server or '(no server)'}, trusting {trust}{presenting}; "
        f"written to {path}"
    )
    if current is not None and current.name != name:
        say(f"the current cluster is {current.name}: `csctl config use-cluster {name}`", err=True)


@config.command("use-cluster")
@click.argument("name")
def use_cluster_(name: str) -> None:
    """Make NAME the cluster csctl talks to (its server and CA).

    \b
    Example:
      csctl config use-cluster lab
    """
    path = config_path(os.environ)
    try:
        use_cluster(path, name)
    except ConfigError as exc:
        raise CsctlConfigError(str(exc)) from None
    say(f"current cluster: {name}")
