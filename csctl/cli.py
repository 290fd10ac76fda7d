"""The `csctl` command line: cluster management for appliance admins and users.

Talks to the coordinator only through `appliance.client`. Every failure is printed as one
`error: ...` line on stderr with exit status 1 (2 for usage and configuration mistakes).
"""

from __future__ import annotations

from typing import Any

import click

import appliance
from appliance.domain.errors import ApplianceError
from csctl.jobs import cancel, get
from csctl.session import Session, fail


class _CsctlGroup(click.Group):
    """Turns the client's errors into one line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ApplianceError, TimeoutError) as exc:
            fail(exc)


@click.group(cls=_CsctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--server",
    "-s",
    metavar="HOST:PORT",
    help="gRPC address of the appliance (else $CSCTL_SERVER, else `server:` in the config "
    "file $CSCTL_CONFIG or ~/.config/csctl/config.yaml, else 127.0.0.1:50051).",
)
@click.pass_context
def cli(ctx: click.Context, server: str | None) -> None:
    """Manage wsjobs on a wafer-scale appliance.

    \b
    Examples:
      csctl get jobs
      csctl --server coordinator:50051 get jobs -a -l team=nlp
      csctl get job wsjob-abc123def456gh
      csctl cancel job wsjob-abc123def456gh
    """
    ctx.obj = Session(server_flag=server)


@cli.command()
@click.pass_obj
def version(session: Session) -> None:
    """Show the csctl version and the appliance's version.

    \b
    Example:
      csctl version
    """
    click.echo(f"csctl (client): {appliance.__version__}")
    server_version = session.client().version()
    click.echo(f"appliance (server {session.server.address}): {server_version}")


cli.add_command(get)
cli.add_command(cancel)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="csctl")
