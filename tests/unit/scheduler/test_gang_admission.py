"""admit(): gang admission on a snapshot, priority then submit time, head reservation, backfill.

(admit lives in appliance.scheduler; it is a pure function over domain types, tested here.)
"""

from __future__ import annotations

from collections.abc import Mapping

from appliance.domain.backlog import Placement, QueuedJob
from appliance.domain.inventory import Node, NodeKind, NodeState, NodeUsage
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.spec import Priority
from appliance.scheduler.admission import Admission, admit

GIB = 1 << 30


def pool(
    systems: int = 4,
    memx: tuple[int, ...] = (16 * GIB,),
    swarmx: tuple[int, ...] = (4,),
    used: Mapping[str, int] | None = None,
    states: Mapping[str, NodeState] | None = None,
    workers: tuple[int, ...] = (),
) -> list[NodeUsage]:
    nodes = (
        [Node(f"cs2-{i:02d}", NodeKind.SYSTEM, 1) for i in range(1, systems + 1)]
        + [Node(f"memx-{i:02d}", NodeKind.MEMORYX, c) for i, c in enumerate(memx, 1)]
        + [Node(f"swarmx-{i:02d}", NodeKind.SWARMX, c) for i, c in enumerate(swarmx, 1)]
        + [Node(f"worker-{i:02d}", NodeKind.WORKER, c) for i, c in enumerate(workers, 1)]
    )
    used, states = used or {}, states or {}
    return [
        NodeUsage(
            Node(n.name, n.kind, n.capacity, states.get(n.name, NodeState.OK)), used.get(n.name, 0)
        )
        for n in nodes
    ]


def job(
    job_id: str,
    systems: int = 1,
    *,
    priority: Priority = Priority.P2,
    at: float = 0.0,
    memx_bytes: int = GIB,
    memx_count: int = 1,
    ports: int | None = None,
    workers: int = 0,
) -> QueuedJob:
    plan = ReplicaPlan(
        groups=(
            ReplicaGroup(Role.CHIEF, 1),
            ReplicaGroup(Role.CS2, systems, demand=1),
            ReplicaGroup(Role.MEMORYX, memx_count, demand=memx_bytes),
            ReplicaGroup(Role.SWARMX, 1, demand=systems if ports is None else ports),
        )
        + ((ReplicaGroup(Role.WORKER, workers, demand=1),) if workers else ()),
        model_bytes=memx_bytes * memx_count,
    )
    return QueuedJob(job_id, priority, at, plan)


def admitted(result: Admission) -> list[str]:
    return [d.job_id for d in result.admitted]


def placed(result: Admission, job_id: str, role: Role) -> list[str]:
    [decision] = [d for d in result.admitted if d.job_id == job_id]
    return [p.node for p in decision.placements if p.role is role]


def test_a_job_that_fits_gets_every_replica_placed() -> None:
    result = admit([job("a", 2, memx_bytes=3 * GIB)], pool())

    [decision] = result.admitted
    assert decision.placements == (
        Placement("cs2-0", Role.CS2, "cs2-01", 1),
        Placement("cs2-1", Role.CS2, "cs2-02", 1),
        Placement("memoryx-0", Role.MEMORYX, "memx-01", 3 * GIB),
        Placement("swarmx-0", Role.SWARMX, "swarmx-01", 2),
    )
    assert result.pending == {}


def test_admission_is_all_or_nothing() -> None:
    result = admit([job("big", 3)], pool(used={"cs2-01": 1, "cs2-02": 1}))

    assert result.admitted == []
    assert result.pending == {"big": "needs 3 systems, 2 free"}


def test_nodes_that_are_not_ok_are_not_free() -> None:
    states = {"cs2-01": NodeState.MAINTENANCE, "cs2-02": NodeState.ERROR}

    result = admit([job("a", 3)], pool(states=states))

    assert result.pending == {"a": "needs 3 systems, 2 free"}


def test_order_is_priority_then_submit_time_then_id() -> None:
    queue = [
        job("p2-early", priority=Priority.P2, at=1.0),
        job("p1-late", priority=Priority.P1, at=9.0),
        job("p3", priority=Priority.P3, at=0.0),
        job("p1-early-b", priority=Priority.P1, at=5.0),
        job("p1-early-a", priority=Priority.P1, at=5.0),
    ]

    everything = admit(queue, pool(systems=5, swarmx=(5,)))
    two_systems = admit(queue, pool(systems=2))

    assert admitted(everything) == ["p1-early-a", "p1-early-b", "p1-late", "p2-early", "p3"]
    assert placed(everything, "p1-early-a", Role.CS2) == ["cs2-01"]
    assert admitted(two_systems) == ["p1-early-a", "p1-early-b"]
    assert two_systems.pending["p1-late"] == "needs 1 system, 0 free"
    assert two_systems.pending["p3"] == "needs 1 system, 0 free; behind p1-late (P1, 1 system)"


def test_pending_reasons_name_the_memoryx_and_swarmx_shortfall() -> None:
    result = admit(
        [job("a", 2, memx_bytes=8 * GIB, ports=3)],
        pool(
            memx=(16 * GIB, 16 * GIB),
            swarmx=(4,),
            used={"memx-01": 10 * GIB, "memx-02": 9 * GIB, "swarmx-01": 2},
        ),
    )

    assert result.pending == {
        "a": "needs 1 MemoryX x 8.00 GiB, room for 0; needs 1 SwarmX x 3 ports, room for 0"
    }


def test_the_head_reserves_what_it_can_use_so_a_smaller_job_cannot_take_it() -> None:
    nodes = pool(swarmx=(4, 4), used={"cs2-01": 1, "cs2-02": 1})
    head = job("head", 4, priority=Priority.P1)
    small = job("small", 1, priority=Priority.P2)

    alone = admit([small], nodes)
    behind = admit([head, small], nodes)

    assert admitted(alone) == ["small"]  # it would fit on its own...
    assert behind.admitted == []  # ...but cs2-03 and cs2-04 are held for the head
    assert behind.pending == {
        "head": "needs 4 systems, 2 free",
        "small": "needs 1 system, 0 free; behind head (P1, 4 systems)",
    }


def test_a_job_behind_the_head_backfills_on_what_the_head_cannot_use() -> None:
    # The head is blocked on MemoryX memory while systems are free: it keeps cs2-01/02, its
    # SwarmX ports and one whole MemoryX node to drain (memx-01); a job behind it may run on
    # cs2-03/04 and the MemoryX room left on memx-02.
    nodes = pool(swarmx=(4, 4), memx=(16 * GIB, 16 * GIB),
                 used={"memx-01": 12 * GIB, "memx-02": 12 * GIB})  # fmt: skip
    head = job("head", 2, priority=Priority.P1, at=0.0, memx_bytes=8 * GIB)
    backfill = job("backfill", 2, at=1.0, memx_bytes=2 * GIB)
    late = job("late", 1, at=2.0)

    result = admit([late, backfill, head], nodes)

    assert admitted(result) == ["backfill"]
    assert placed(result, "backfill", Role.CS2) == ["cs2-03", "cs2-04"]
    assert placed(result, "backfill", Role.MEMORYX) == ["memx-02"]
    assert result.pending == {
        "head": "needs 1 MemoryX x 8.00 GiB, room for 0",
        "late": "needs 1 system, 0 free; behind head (P1, 2 systems)",
    }


def test_backfill_never_takes_room_on_the_memoryx_node_the_head_waits_for() -> None:
    # memx-01 is the only node that can ever host the head's 8 GiB replica: a small job that
    # took 2 GiB of it would keep the head waiting after the 12 GiB job ends.
    nodes = pool(swarmx=(4, 4), used={"memx-01": 12 * GIB})
    head = job("head", 2, priority=Priority.P1, at=0.0, memx_bytes=8 * GIB)
    small = job("small", 1, at=1.0, memx_bytes=2 * GIB)

    assert admitted(admit([small], nodes)) == ["small"]  # it would fit on its own
    result = admit([head, small], nodes)
    assert result.admitted == []
    assert result.pending["small"] == (
        "needs 1 MemoryX x 2.00 GiB, room for 0; behind head (P1, 2 systems)"
    )


def test_backfill_never_takes_swarmx_ports_the_head_holds() -> None:
    nodes = pool(memx=(16 * GIB, 16 * GIB), used={"memx-01": 12 * GIB, "memx-02": 12 * GIB},
                 swarmx=(4,))  # fmt: skip
    head = job("head", 2, priority=Priority.P1, memx_bytes=8 * GIB, ports=3)
    behind = job("behind", 1, at=1.0, ports=2)

    result = admit([head, behind], nodes)

    assert result.admitted == []
    assert result.pending["behind"] == (
        "needs 1 SwarmX x 2 ports, room for 0; behind head (P1, 2 systems)"
    )


def test_shared_nodes_go_to_the_one_with_the_most_room() -> None:
    nodes = pool(
        memx=(16 * GIB, 16 * GIB, 16 * GIB), used={"memx-01": 4 * GIB, "memx-03": 2 * GIB}
    )

    result = admit([job("a", 1, memx_bytes=GIB)], nodes)

    assert placed(result, "a", Role.MEMORYX) == ["memx-02"]


def test_the_snapshot_is_not_modified() -> None:
    nodes = pool()
    queue = [job("a", 2), job("b", 4)]
    before = (list(nodes), list(queue))

    admit(queue, nodes)

    assert (nodes, queue) == before


def test_input_workers_take_slots_on_the_worker_node_with_the_most_room() -> None:
    nodes = pool(workers=(4, 4), used={"worker-01": 1})

    result = admit([job("a", 2, workers=4)], nodes)

    # 3 and 4 slots free: each worker goes where most are left (the lower name among equals).
    assert placed(result, "a", Role.WORKER) == ["worker-02", "worker-01", "worker-02", "worker-01"]
    [decision] = result.admitted
    assert {p.amount for p in decision.placements if p.role is Role.WORKER} == {1}


def test_a_job_waits_for_input_worker_slots_saying_so() -> None:
    nodes = pool(workers=(4, 4), used={"worker-01": 3, "worker-02": 4})

    result = admit([job("a", 2, workers=2), job("b", 1)], nodes)

    assert admitted(result) == ["b"]
    assert result.pending["a"] == "needs 2 worker-node x 1 slot, room for 1"


def test_input_workers_are_not_placed_on_a_worker_node_out_of_service() -> None:
    nodes = pool(workers=(8, 8), states={"worker-01": NodeState.DRAIN})

    result = admit([job("a", 1, workers=2)], nodes)

    assert placed(result, "a", Role.WORKER) == ["worker-02", "worker-02"]
