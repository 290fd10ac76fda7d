"""What the cluster page sums up: nodes busy, free and out of service by kind, what jobs hold
in each kind's unit, and the queued jobs by what they wait for."""

from __future__ import annotations

import dataclasses
import json

from appliance.domain.curves import Curves, EvalPoint, TrainPoint
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage, default_pool
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import validate_spec
from appliance.server.web.summaries import amount, curves_response, kind_totals, waiting_for


def test_totals_by_kind() -> None:
    pool = default_pool()  # cs2-01..04, memx-01..04 (16 GiB), swarmx-01..02, worker-01..02
    states = {"cs2-02": NodeState.DRAIN, "cs2-03": NodeState.MAINTENANCE,
              "cs2-04": NodeState.DRAIN, "memx-04": NodeState.ERROR}  # fmt: skip
    used = {"cs2-01": 1, "cs2-04": 1, "memx-01": 3 << 29, "swarmx-01": 2, "worker-02": 1}
    usage = [
        NodeUsage(
            dataclasses.replace(n, state=states.get(n.name, NodeState.OK)), used.get(n.name, 0)
        )
        for n in pool
    ]
    systems, memoryx, swarmx, workers = kind_totals(usage)
    assert systems == {
        "kind": "system", "name": "CS-2 systems", "nodes": 4, "busy": 2, "free": 0, "out": 2,
        "out_states": "1 drain, 1 maintenance", "in_use": "2 of 4",
    }  # fmt: skip
    assert (memoryx["busy"], memoryx["free"], memoryx["out"]) == (1, 2, 1)
    assert memoryx["in_use"] == "1.5 GiB of 64 GiB"
    assert (swarmx["busy"], swarmx["free"], swarmx["in_use"]) == (1, 1, "2 ports of 8 ports")
    assert (workers["name"], workers["busy"], workers["free"]) == ("Input-worker nodes", 1, 1)
    assert workers["in_use"] == "1 slot of 16 slots"


def test_amounts_in_each_kinds_unit() -> None:
    assert amount(NodeKind.MEMORYX, 0) == "0 GiB"
    assert amount(NodeKind.MEMORYX, 16 << 30) == "16 GiB"
    assert amount(NodeKind.MEMORYX, 5 << 20) == "5 MiB"
    assert amount(NodeKind.SWARMX, 1) == "1 port"
    assert amount(NodeKind.WORKER, 8) == "8 slots"
    assert amount(NodeKind.SYSTEM, 3) == "3"


def queued(job_id: str, code: str, message: str) -> Job:
    spec = validate_spec(params_yaml="model: {name: fc_mnist}\n", num_csx=1, num_steps=2)
    return Job(id=job_id, user="alice", spec=spec, phase=Phase.QUEUED, created_at=1.0,
               updated_at=1.0, pending_reason=message, pending_reason_code=code)  # fmt: skip


def test_queued_jobs_by_what_they_wait_for() -> None:
    jobs = [queued("a", "Capacity", "needs 1 system; 0 free"), queued("b", "Dependency", "x"),
            queued("c", "Capacity", "needs 2 systems; 0 free")]  # fmt: skip
    assert waiting_for(jobs, 10) == {
        "total": 3, "capped": False,
        "reasons": [("Capacity", 2, "needs 1 system; 0 free"), ("Dependency", 1, "x")],
    }  # fmt: skip
    assert waiting_for(jobs, 3)["capped"]
    assert waiting_for([], 10) == {"total": 0, "capped": False, "reasons": []}


def test_curves_as_the_charts_json() -> None:
    curves = Curves((TrainPoint(1, 2.5, 0.003),), (EvalPoint(1, 2.0, 0.25),), thinned=True)
    answer = curves_response(curves)
    assert answer.media_type == "application/json"
    assert answer.headers["cache-control"] == "no-store"
    assert json.loads(answer.body) == {
        "train": [[1, 2.5, 0.003]], "eval": [[1, 2.0, 0.25]], "thinned": True, "problem": "",
    }  # fmt: skip
