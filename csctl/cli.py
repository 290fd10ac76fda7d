"""The `csctl` command line: cluster management for appliance admins and users.

Talks to the coordinator only through `appliance.client`. Exit status: 0 on success; 1 when
the server refuses or fails (an unknown job, a finished job, an unreachable appliance), printed
as one `error: ...` line on stderr; 2 for usage and configuration mistakes; 130 on Ctrl-C.
"""

from __future__ import annotations

from typing import Any

import click

import appliance
from appliance.domain.errors import ApplianceError
from csctl import arrays, audit, job_list, limits, nodes  # noqa: F401  (register `get jobs`, `get audit`, ...)
from csctl.completion import completion
from csctl.configure import config
from csctl.controls import job_group, label
from csctl.holds import hold, release, resume, suspend
from csctl.jobs import cancel, get
from csctl.logs import events, log_export, logs
from csctl.queues import queue_group
from csctl.render import say
from csctl.reservations import reservation_group
from csctl.session import Session, fail
from csctl.systems import node_alias, system_group

_EPILOG = """\b
Shell completion (commands, options and job ids): see `csctl completion --help`, e.g.
  eval "$(csctl completion bash)"
"""


class _CsctlGroup(click.Group):
    """Turns the client's errors into one line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ApplianceError, TimeoutError) as exc:
            fail(exc)
        except KeyboardInterrupt:  # Ctrl-C while following logs or events
            say("", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(
    cls=_CsctlGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_EPILOG
)
@click.option(
    "--server",
    "-s",
    metavar="HOST:PORT",
    help="gRPC address of the appliance (else $CSCTL_SERVER, else `server:` in the config "
    "file $CSCTL_CONFIG or ~/.config/csctl/config.yaml, else 127.0.0.1:50051).",
)
@click.option(
    "--token",
    metavar="TOKEN",
    help="Bearer token when the appliance has authentication on (else $CSCTL_TOKEN, else "
    "`token:` in the config file).",
)
@click.option(
    "--certificate-authority",
    "certificate_authority",
    metavar="FILE",
    help="PEM CA the server's certificate must chain to (else $CSCTL_CA, else the current "
    "cluster's in the config file; `appliance serve` prints its path).",
)
@click.option(
    "--client-certificate",
    "client_certificate",
    metavar="FILE",
    help="PEM certificate to present to a server requiring one (mutual TLS), with "
    "--client-key (else $CSCTL_CLIENT_CERT, else the current cluster's in the config file).",
)
@click.option(
    "--client-key",
    "client_key",
    metavar="FILE",
    help="PEM key of --client-certificate, not readable by others (else $CSCTL_CLIENT_KEY).",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Plaintext, no TLS: only to a server on a loopback address started with --insecure.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    server: str | None,
    token: str | None,
    certificate_authority: str | None,
    client_certificate: str | None,
    client_key: str | None,
    insecure: bool | None,
) -> None:
    """Manage wsjobs on a wafer-scale appliance.

    \b
    Examples:
      csctl get jobs
      csctl --server coordinator:50051 get jobs -a -l team=nlp
      csctl get job wsjob-abc123def456gh
      csctl get jobs --show-pending
      csctl job set-priority wsjob-abc123def456gh p1
      csctl label job wsjob-abc123def456gh team=nlp tmp-
      csctl logs wsjob-abc123def456gh -f
      csctl get nodes
      csctl system set-state cs2-02 error --reason fan
      csctl get queues
      csctl queue set nlp --systems 2 --weight 2
      csctl get usage --since 7d --by queue
      csctl cancel job wsjob-abc123def456gh
      csctl hold job wsjob-abc123def456gh
      csctl reservation create fan-swap --maint --systems cs2-02 --duration 2:00:00
    """
    ctx.obj = Session(
        server, token, certificate_authority, insecure, client_certificate, client_key
    )


@cli.command()
@click.pass_obj
def version(session: Session) -> None:
    """Show the csctl version and the appliance's version.

    \b
    Example:
      csctl version
    """
    say(f"csctl (client): {appliance.__version__}")
    server_version = session.client().version()
    say(f"appliance (server {session.server.address}): {server_version}")


for command in (
    get,
    cancel,
    hold,
    release,
    suspend,
    resume,
    label,
    job_group,
    logs,
    events,
    log_export,
    config,
    system_group,
    queue_group,
    reservation_group,
    completion,
):
    cli.add_command(command)
cli.add_command(node_alias)  # MemoryX and SwarmX nodes: the same commands, listed once


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="csctl")
