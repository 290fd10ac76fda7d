"""What the pages sum up or send beside their HTML: the pool's totals by kind, the queued jobs
by what they wait for, amounts in their units, and a job's curves as the charts' JSON."""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from typing import Any

from fastapi.responses import Response

from appliance.domain.curves import Curves
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.job import Job

KIND_NAMES = {NodeKind.SYSTEM: "CS-2 systems", NodeKind.MEMORYX: "MemoryX nodes",
              NodeKind.SWARMX: "SwarmX nodes", NodeKind.WORKER: "Input-worker nodes"}  # fmt: skip
JSON_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def amount(kind: NodeKind, value: int) -> str:
    """A node's capacity (or what jobs hold of it) in its unit: bytes of MemoryX memory,
    SwarmX ports, input-worker slots, CS-2 systems."""
    if kind is NodeKind.MEMORYX:
        gib = value / (1 << 30)
        if 0 < gib < 0.1:
            return f"{value / (1 << 20):.0f} MiB"
        return f"{gib:.1f}".removesuffix(".0") + " GiB"
    if kind is NodeKind.SWARMX:
        return f"{value} port{'' if value == 1 else 's'}"
    if kind is NodeKind.WORKER:
        return f"{value} slot{'' if value == 1 else 's'}"
    return str(value)


def kind_totals(pool: Sequence[NodeUsage]) -> list[dict[str, Any]]:
    """Per kind of node: how many, busy (holding a job's part), free (ok and holding none),
    out of service (drain, maintenance or error, holding none), and what jobs hold of the
    kind's capacity."""
    totals = []
    for kind in NodeKind:
        nodes = [u for u in pool if u.node.kind is kind]
        out = collections.Counter(
            u.node.state.value for u in nodes if not u.used and u.node.state is not NodeState.OK
        )
        used, capacity = sum(u.used for u in nodes), sum(u.node.capacity for u in nodes)
        totals.append({
            "kind": kind.value, "name": KIND_NAMES[kind], "nodes": len(nodes),
            "busy": sum(1 for u in nodes if u.used),
            "free": sum(1 for u in nodes if not u.used and u.node.state is NodeState.OK),
            "out": sum(out.values()),
            "out_states": ", ".join(f"{n} {state}" for state, n in sorted(out.items())),
            "in_use": f"{amount(kind, used)} of {amount(kind, capacity)}",
        })  # fmt: skip
    return totals


def waiting_for(queued: Sequence[Job], most: int) -> dict[str, Any]:
    """The queued jobs by their pending reason's code, most first, with one job's message as
    an example; `capped`: the list stopped at `most` jobs, so there may be more."""
    by_code: collections.Counter[str] = collections.Counter()
    example: dict[str, str] = {}
    for job in queued:
        code = job.pending_reason_code or "-"
        by_code[code] += 1
        example.setdefault(code, job.pending_reason)
    reasons = [(code, n, example[code]) for code, n in by_code.most_common()]
    return {"total": len(queued), "capped": len(queued) >= most, "reasons": reasons}


def curves_response(curves: Curves) -> Response:
    """The charts' JSON: `train` [step, loss, learning rate] and `eval` [step, loss, accuracy]
    points in step order, whether they were `thinned`, and a `problem` reading them."""
    body = {
        "train": [[p.step, p.loss, p.learning_rate] for p in curves.train],
        "eval": [[p.step, p.loss, p.accuracy] for p in curves.evals],
        "thinned": curves.thinned,
        "problem": curves.problem,
    }
    return Response(json.dumps(body), media_type="application/json", headers=JSON_HEADERS)
