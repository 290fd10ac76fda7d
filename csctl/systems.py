"""`csctl system drain|set-state|events NAME`: an admin takes a node out of service or puts it
back (CS-2 systems, MemoryX and SwarmX nodes alike; `csctl node ...` is the same group)."""

from __future__ import annotations

import time

import click

from appliance.domain.inventory import NodeState
from appliance.domain.phases import Phase
from csctl import render
from csctl.render import say
from csctl.session import Session

EVENT_COLUMNS = ("AGE", "STATE", "BY", "REASON")
_REASON = click.option("--reason", default="", help="Why (shown with the node and its events).")


@click.group(
    "system",
    short_help="Drain systems and nodes, set their state (admins; alias: node).",
)
def system_group() -> None:
    """Drain a CS-2 system (or MemoryX/SwarmX node), set its state, see its history (admins).

    \b
    Examples:
      csctl system drain cs2-02 --reason "swap the fan on Friday"
      csctl system set-state cs2-02 error --reason fan
      csctl system set-state cs2-02 ok
      csctl system events cs2-02
    """


# `csctl node ...`: the same commands under the name MemoryX and SwarmX users reach for; left
# out of `csctl --help`, which lists the group once, as `system`.
node_alias = click.Group(
    "node", commands=system_group.commands, help=system_group.help, hidden=True
)


@system_group.command("drain")
@click.argument("name")
@_REASON
@click.pass_obj
def drain(session: Session, name: str, reason: str) -> None:
    """No new job lands on NAME; the job running on it finishes.

    \b
    Example:
      csctl system drain cs2-02 --reason "maintenance window Friday"
    """
    _change(session, name, NodeState.DRAIN, reason)


@system_group.command("set-state")
@click.argument("name")
@click.argument("state", type=click.Choice([s.value for s in NodeState], case_sensitive=False))
@_REASON
@click.pass_obj
def set_state(session: Session, name: str, state: str, reason: str) -> None:
    """Set NAME to ok, error, maintenance or drain.

    error or maintenance takes NAME from the job running on it: the job is requeued from its
    newest checkpoint if its restart policy (max_restarts) has a restart left (for maintenance
    it first writes one, then is requeued), else it FAILS naming NAME. No new job lands on
    NAME until it is set ok.

    \b
    Examples:
      csctl system set-state cs2-02 error --reason fan
      csctl system set-state memx-01 maintenance --reason "DIMM swap"
      csctl system set-state cs2-02 ok
    """
    _change(session, name, NodeState(state.lower()), reason)


@system_group.command("events")
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(("table", "json", "yaml")), default="table")
@click.pass_obj
def events(session: Session, name: str, output: str) -> None:
    """The state changes of NAME: when, which state, by whom, why.

    \b
    Example:
      csctl system events cs2-02
    """
    found = session.client().node_events(name)
    documents = [
        {"time": render.timestamp(e.time), "state": e.state.value, "by": e.by, "reason": e.reason}
        for e in found
    ]
    if output == "json":
        say(render.to_json(documents))
    elif output == "yaml":
        say(render.to_yaml(documents))
    else:
        now = time.time()
        rows = [[render.format_age(now - e.time), e.state.value, e.by, e.reason] for e in found]
        say(render.format_table(EVENT_COLUMNS, rows))


_STATE_WORDS = {
    NodeState.OK: "ok",
    NodeState.DRAIN: "draining",
    NodeState.ERROR: "in error",
    NodeState.MAINTENANCE: "in maintenance",
}


def _change(session: Session, name: str, state: NodeState, reason: str) -> None:
    """Change the state, then say what it did to each job that was on the node."""
    client = session.client()
    before = {node.name: node.jobs for node in client.nodes()}.get(name, ())
    node = client.set_node_state(name, state, reason)
    line = f"{node.kind.value} {node.name} is {_STATE_WORDS[node.state]}"
    if state is NodeState.DRAIN:
        line += ": no new job lands on it"
        if before:
            line += f"; {', '.join(before)} {'runs' if len(before) == 1 else 'run'} on to the end"
    elif state.takes_jobs_away and before:
        fates = []
        for job_id in before:
            job = client.get_job(job_id)
            if job.phase is Phase.FAILED:
                fates.append(f"{job_id} FAILED ({job.reason})")
            elif job.phase.terminal:
                fates.append(f"{job_id} had ended ({job.phase.value})")
            else:  # a restart left, or it was leaving anyway (preempted): queued again
                fates.append(f"{job_id} is being requeued")
        line += "; " + "; ".join(fates)
    say(line)
