"""The pool's shape (made once for many submits, #38) says what its nodes say: how many of each
kind, the largest of each, the worker slots; so a plan made on it is the plan made on the
nodes, refusals included, word for word (tests/unit/domain/test_replica_plan.py has what the
plans are)."""

from __future__ import annotations

import random

import pytest

from appliance.domain.errors import ApplianceError
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.plan import Pool, PoolShape, ReplicaPlan, Role, plan_replicas, pool_shape
from appliance.domain.spec import JobSpec, validate_spec
from tests.unit.harness import PARAMS

WORKERS = PARAMS + "train_input: {data_dir: /data/mnist}\nrunconfig: {num_workers_per_csx: 2}\n"
PIPELINED = PARAMS + "runconfig: {execution_strategy: pipeline}\n"


def pool(seed: int) -> list[Node]:
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(1, 9)):
        nodes.append(
            Node(f"cs2-{i}", NodeKind.SYSTEM, 1, wafer_bytes=rng.choice([1, 2**30, 2**36]))
        )
    scarce = seed % 10 == 0  # now and then no MemoryX, SwarmX or workers at all
    for i in range(rng.randint(0 if scarce else 1, 4)):
        nodes.append(Node(f"mx-{i}", NodeKind.MEMORYX, rng.choice([2**10, 2**20, 2**34])))
    for i in range(rng.randint(0 if scarce else 1, 3)):
        nodes.append(Node(f"sx-{i}", NodeKind.SWARMX, rng.randint(1, 4)))
    for i in range(rng.randint(0, 3)):
        nodes.append(Node(f"w-{i}", NodeKind.WORKER, rng.randint(1, 8)))
    rng.shuffle(nodes)
    return nodes


Outcome = ReplicaPlan | tuple[type, str, str | None]


def outcome(spec: JobSpec, on: Pool) -> Outcome:
    try:
        return plan_replicas(spec, on)
    except ApplianceError as refused:
        return type(refused), str(refused), refused.field


def cases(seed: int) -> list[tuple[JobSpec, Outcome, Outcome]]:
    """(spec, the plan or refusal on the nodes, the same on the shape) for one random pool."""
    nodes = pool(seed)
    shape = pool_shape(nodes)
    found = []
    for params in (PARAMS, WORKERS, PIPELINED):
        for csx, least in ((1, 0), (2, 0), (4, 0), (8, 0), (6, 2)):
            if params is PIPELINED and least:
                continue
            spec = validate_spec(params_yaml=params, num_csx=csx, num_steps=5, num_csx_min=least)
            found.append((spec, outcome(spec, nodes), outcome(spec, shape)))
    return found


@pytest.mark.parametrize("seed", range(60))
def test_the_shape_is_what_the_nodes_say(seed: int) -> None:
    nodes = pool(seed)

    def of(kind: NodeKind) -> list[Node]:
        return [n for n in nodes if n.kind is kind]

    assert pool_shape(nodes) == PoolShape(
        systems=len(of(NodeKind.SYSTEM)),
        largest_wafer=max(n.wafer_bytes for n in of(NodeKind.SYSTEM)),
        memoryx=len(of(NodeKind.MEMORYX)),
        memoryx_bytes=max((n.capacity for n in of(NodeKind.MEMORYX)), default=0),
        swarmx=len(of(NodeKind.SWARMX)),
        fanout=max((n.capacity for n in of(NodeKind.SWARMX)), default=0),
        worker_slots=sum(n.capacity for n in of(NodeKind.WORKER)),
    )


@pytest.mark.parametrize("seed", range(60))
def test_the_shape_plans_as_the_nodes_do(seed: int) -> None:
    for _, on_nodes, on_shape in cases(seed):
        assert on_shape == on_nodes


def test_the_random_pools_give_plans_and_every_kind_of_refusal() -> None:
    outcomes = [o for seed in range(60) for _, o, _ in cases(seed)]
    plans = [o for o in outcomes if isinstance(o, ReplicaPlan)]
    refusals = {o[1].split(" ")[1] for o in outcomes if isinstance(o, tuple)}
    assert len(plans) >= 50 and any(p.group(Role.WORKER).count for p in plans)
    assert len(refusals) >= 4, refusals
