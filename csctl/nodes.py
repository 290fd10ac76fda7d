"""`csctl get systems`, `csctl get nodes` and `csctl get nodegroups`: the appliance's pool."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import click

from appliance.client import NodeStatus
from appliance.domain.inventory import NodeKind, NodeState
from csctl import render
from csctl.jobs import get
from csctl.render import say
from csctl.session import Session

SYSTEM_COLUMNS = ("NAME", "STATE", "SINCE", "JOB", "RESERVATION", "REASON")
NODE_COLUMNS = ("NAME", "KIND", "STATE", "USED/CAPACITY", "JOBS", "REASON")
GROUP_COLUMNS = ("NODEGROUP", "NODES", "OK", "ERROR", "MAINTENANCE", "DRAIN", "FREE/CAPACITY")
_FORMATS = ("table", "json", "yaml")


def _output_option(function: Any) -> Any:
    return click.option(
        "-o", "--output", type=click.Choice(_FORMATS), default="table", show_default=True
    )(function)


def amount(kind: NodeKind, value: int) -> str:
    """A capacity in its unit: bytes in binary units for MemoryX, plain counts otherwise."""
    return render.format_bytes(value) if kind is NodeKind.MEMORYX else str(value)


def systems_table(nodes: Sequence[NodeStatus], now: float | None = None) -> str:
    """NAME STATE SINCE JOB RESERVATION REASON for the CS-2 systems; STATE is `in-use` for an
    ok system held by a job, SINCE how long ago an admin set the state, RESERVATION the
    reservation holding it now or next."""
    now = time.time() if now is None else now
    rows = [
        [
            node.name,
            _system_state(node),
            _since(node, now),
            ",".join(node.jobs),
            node.reservation or "-",
            node.reason,
        ]
        for node in nodes
        if node.kind is NodeKind.SYSTEM
    ]
    return render.format_table(SYSTEM_COLUMNS, rows)


def _since(node: NodeStatus, now: float) -> str:
    return f"{render.format_age(now - node.since)} ago" if node.since else "-"


def nodes_table(nodes: Sequence[NodeStatus]) -> str:
    """NAME KIND STATE USED/CAPACITY JOBS for every node."""
    rows = [
        [
            node.name,
            node.kind.value,
            node.state.value,
            f"{amount(node.kind, node.used)}/{amount(node.kind, node.capacity)}",
            ",".join(node.jobs),
            node.reason,
        ]
        for node in nodes
    ]
    return render.format_table(NODE_COLUMNS, rows)


def nodegroups_table(nodes: Sequence[NodeStatus]) -> str:
    """One row per kind: node counts by state and the free capacity of the `ok` nodes."""
    return render.format_table(GROUP_COLUMNS, [_group_row(kind, nodes) for kind in NodeKind])


def _group_row(kind: NodeKind, nodes: Sequence[NodeStatus]) -> list[str]:
    group = [node for node in nodes if node.kind is kind]

    def count(state: NodeState) -> str:
        return str(sum(1 for node in group if node.state is state))

    free = sum(node.free for node in group)
    capacity = sum(node.capacity for node in group)
    return [
        kind.value,
        str(len(group)),
        count(NodeState.OK),
        count(NodeState.ERROR),
        count(NodeState.MAINTENANCE),
        count(NodeState.DRAIN),
        f"{amount(kind, free)}/{amount(kind, capacity)}",
    ]


def _system_state(node: NodeStatus) -> str:
    if node.state is NodeState.OK and node.jobs:
        return "in-use"
    return node.state.value


def _documents(nodes: Sequence[NodeStatus]) -> list[dict[str, Any]]:
    return [
        {**dataclasses.asdict(node), "kind": node.kind.value, "state": node.state.value,
         "jobs": list(node.jobs), "since": render.timestamp(node.since)}
        for node in nodes
    ]  # fmt: skip


def _echo(nodes: Sequence[NodeStatus], output: str, table: str) -> None:
    if output == "json":
        say(render.to_json(_documents(nodes)))
    elif output == "yaml":
        say(render.to_yaml(_documents(nodes)))
    else:
        say(table)


@get.command("systems")
@_output_option
@click.pass_obj
def get_systems(session: Session, output: str) -> None:
    """List the CS-2 systems: NAME STATE SINCE JOB RESERVATION REASON.

    STATE is ok (free), in-use, drain, error or maintenance; SINCE and REASON say when and why
    an admin set it (csctl system set-state); JOB is the job holding the system; RESERVATION
    the reservation holding it now or next (csctl reservation list).

    \b
    Examples:
      csctl get systems
      csctl get systems -o json
    """
    nodes = [node for node in session.client().nodes() if node.kind is NodeKind.SYSTEM]
    _echo(nodes, output, systems_table(nodes))


@get.command("nodes")
@_output_option
@click.pass_obj
def get_nodes(session: Session, output: str) -> None:
    """List every node of the pool: NAME KIND STATE USED/CAPACITY JOBS.

    Capacity is 1 for a CS-2 system, memory (Ki/Mi/Gi) for MemoryX and ports for SwarmX.

    \b
    Examples:
      csctl get nodes
      csctl get nodes -o yaml
    """
    nodes = session.client().nodes()
    _echo(nodes, output, nodes_table(nodes))


@get.command("nodegroups")
@click.pass_obj
def get_nodegroups(session: Session) -> None:
    """Summarise the pool by kind: node counts by state and free capacity.

    FREE counts only nodes in state ok.

    \b
    Example:
      csctl get nodegroups
    """
    say(nodegroups_table(session.client().nodes()))
