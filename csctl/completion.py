"""`csctl completion bash|zsh|fish`, and the completion of job ids from the appliance.

The scripts are click's own (click.shell_completion); a job id is completed from the newest
jobs of the caller (ListJobs, one short call), and from nothing when the appliance cannot be
reached or the configuration cannot be read: a completion never prints an error or waits.
"""

from __future__ import annotations

import os

import click
from click.shell_completion import CompletionItem, get_completion_class

from appliance.client import ApplianceClient
from appliance.client.user_config import resolve_server, resolve_token

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CSCTL_COMPLETE"
COMPLETION_TIMEOUT = 1.5  # seconds: a tab press must not hang on an appliance far away
COMPLETED_JOBS = 200  # the caller's newest jobs, finished ones too


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish (commands, options, and job
    ids from the appliance).

    \b
    Examples (install it once):
      csctl completion bash > ~/.local/share/bash-completion/completions/csctl
      csctl completion zsh > "${fpath[1]}/_csctl"     # then start a new shell
      csctl completion fish > ~/.config/fish/completions/csctl.fish
      eval "$(csctl completion bash)"                 # this shell only
    """
    root = ctx.find_root().command
    script = get_completion_class(shell)(root, {}, "csctl", COMPLETE_VAR)  # type: ignore[misc]
    click.echo(script.source())


def complete_job_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The caller's newest jobs whose ids start with what was typed (with the phase as help,
    which zsh and fish show); none when the appliance does not answer."""
    root = ctx.find_root()
    try:
        server = resolve_server(root.params.get("server"), os.environ)
        token = resolve_token(root.params.get("token"), os.environ)
        with ApplianceClient(
            server.address,
            timeout=COMPLETION_TIMEOUT,
            detach=True,
            token=token.value if token is not None else None,
        ) as client:
            jobs = client.list_jobs(all=True, mine=True, limit=COMPLETED_JOBS)
    except Exception:  # an unreachable appliance, a bad config: complete nothing, say nothing
        return []
    return [
        CompletionItem(job.id, help=f"{job.phase.value} {job.spec.mode.value}")
        for job in jobs
        if job.id.startswith(incomplete)
    ]
