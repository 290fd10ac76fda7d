"""The replica plan: a pure function from a job spec and the pool's shape to replica groups."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from collections.abc import Sequence

from appliance.domain import model_shapes as models
from appliance.domain.errors import InsufficientCapacity, InvalidSpec
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.params import PIPELINE
from appliance.domain.spec import JobSpec
from appliance.domain.wafer import WaferNeed, describe, gigabytes, wafer_needs


class Role(enum.StrEnum):
    CHIEF = "chief"  # the per-job driver (never "coordinator": that is the control plane)
    CS2 = "cs2"
    MEMORYX = "memoryx"
    SWARMX = "swarmx"
    WORKER = "worker"  # an input worker: reads the job's data set, streams batches to a CS-2


CHIEF_REPLICA = f"{Role.CHIEF}-0"  # the name of a job's one chief replica

# A plan's replica groups as (role, count, demand): what the scheduler groups queued jobs by
# (jobs of one shape fit or do not fit alike).
PlanShape = tuple[tuple[str, int, int], ...]


@dataclasses.dataclass(frozen=True)
class PoolShape:
    """What a plan needs of the pool: how many nodes of each kind and the largest of each.
    Made once per pool (`pool_shape`) by a caller that plans many jobs on one pool: planning
    walked a 1,050-node pool five times per submit (#38)."""

    systems: int
    largest_wafer: int  # bytes, the largest CS-2 wafer's
    memoryx: int
    memoryx_bytes: int  # the largest MemoryX node's
    swarmx: int
    fanout: int  # the largest SwarmX node's ports
    worker_slots: int


def pool_shape(pool: Sequence[Node]) -> PoolShape:
    """The pool's shape, in one pass over its nodes."""
    count = dict.fromkeys(NodeKind, 0)
    largest = dict.fromkeys(NodeKind, 0)
    slots = 0
    for node in pool:
        kind = node.kind
        count[kind] += 1
        size = node.wafer_bytes if kind is NodeKind.SYSTEM else node.capacity
        if size > largest[kind]:
            largest[kind] = size
        if kind is NodeKind.WORKER:
            slots += node.capacity
    return PoolShape(
        systems=count[NodeKind.SYSTEM], largest_wafer=largest[NodeKind.SYSTEM],
        memoryx=count[NodeKind.MEMORYX], memoryx_bytes=largest[NodeKind.MEMORYX],
        swarmx=count[NodeKind.SWARMX], fanout=largest[NodeKind.SWARMX], worker_slots=slots,
    )  # fmt: skip


# A pool as its nodes, or its shape made once for many plans.
Pool = Sequence[Node] | PoolShape


@dataclasses.dataclass(frozen=True)
class ReplicaGroup:
    role: Role
    count: int
    # What one replica holds on its node: bytes on a MemoryX node, ports on a SwarmX node,
    # slots on a worker node.
    demand: int = 0


@dataclasses.dataclass(frozen=True)
class ReplicaPlan:
    groups: tuple[ReplicaGroup, ...]
    model_bytes: int
    # What each CS-2 of the job holds on its wafer (domain/wafer.py): a system whose wafer is
    # smaller cannot run it.
    wafer_bytes: int = 0
    # An elastic job's (domain/elastic.py): the plans of the larger sizes of its range, largest
    # first; this plan is its smallest (what it waits for, and what the queue groups it by).
    larger: tuple[ReplicaPlan, ...] = ()

    @property
    def systems(self) -> int:
        """The CS-2 systems it runs on."""
        return self.group(Role.CS2).count

    def sizes(self) -> tuple[ReplicaPlan, ...]:
        """The plans of every size it may run on, largest first (one for a fixed size)."""
        return (*self.larger, self)

    def of_size(self, systems: int) -> ReplicaPlan:
        """The plan of its range that runs on `systems` CS-2s (this one when none does)."""
        return next((p for p in self.larger if p.systems == systems), self)

    @functools.cached_property
    def shape(self) -> tuple[tuple[str, int, int], ...]:
        """The groups as plain tuples: a cheap key for plans that need the same resources."""
        return tuple((g.role.value, g.count, g.demand) for g in self.groups)

    def group(self, role: Role) -> ReplicaGroup:
        """The role's group; a role the plan has none of (a pipelined job's MemoryX) counts 0."""
        return next((g for g in self.groups if g.role is role), ReplicaGroup(role, 0))

    def replica_names(self) -> list[tuple[str, Role, int]]:
        return [(f"{g.role}-{i}", g.role, i) for g in self.groups for i in range(g.count)]


def plan_replicas(spec: JobSpec, pool: Pool) -> ReplicaPlan:
    """chief x1, cs2 x num_csx, memoryx x M (model bytes over node capacity), swarmx x S (a
    pipelined job: chief and one CS-2 only), and for a job that reads a data set, worker x
    num_csx * num_workers_per_csx (one slot each).

    An elastic job's plan (num_csx_min) is that of its fewest systems, with the plans of its
    larger sizes (`larger`). Raises InsufficientCapacity when the plan (of any size of the
    range) can never fit the pool, whatever else runs.
    """
    shape = pool if isinstance(pool, PoolShape) else pool_shape(pool)
    if not spec.num_csx_min:
        return _plan_of_size(spec, shape)
    if spec.typed_params.runconfig.execution_strategy == PIPELINE:
        raise InvalidSpec(
            f"num_csx_min={spec.num_csx_min}: a pipelined job runs on one CS-2 and cannot be "
            "elastic; use runconfig.execution_strategy weight_streaming or one size",
            field="num_csx_min",
        )
    plans = [
        _plan_of_size(_sized(spec, n), shape)
        for n in range(spec.num_csx, spec.num_csx_min - 1, -1)
    ]
    return dataclasses.replace(plans[-1], larger=tuple(plans[:-1]))


def _sized(spec: JobSpec, systems: int) -> JobSpec:
    """`spec` of exactly `systems` CS-2s (its parsed params kept)."""
    sized = dataclasses.replace(spec, num_csx=systems, num_csx_min=0)
    sized.__dict__["typed_params"] = spec.typed_params
    return sized


def _plan_of_size(spec: JobSpec, pool: PoolShape) -> ReplicaPlan:
    if spec.num_csx > pool.systems:
        raise InsufficientCapacity(
            f"num_csx={spec.num_csx} is more than the {pool.systems} CS-2 systems in the "
            f"cluster; ask for at most {pool.systems}",
            field="num_csx",
        )
    parsed = spec.typed_params
    model_bytes = models.memory_bytes(parsed)
    strategy = parsed.runconfig.execution_strategy
    need = wafer_needs(parsed, spec.num_csx, strategy)
    _check_wafer(need, strategy, pool.largest_wafer)
    if strategy == PIPELINE:
        groups = _pipelined_groups(spec)
    else:
        groups = _streaming_groups(spec, model_bytes, pool)
    workers = parsed.input_workers(spec.num_csx, spec.mode)
    if workers:
        slots = pool.worker_slots
        if workers > slots:
            raise InsufficientCapacity(
                f"the job needs {workers} input workers (num_csx={spec.num_csx} x "
                f"runconfig.num_workers_per_csx) but the cluster's worker nodes have {slots} "
                "slots; ask for fewer",
                field="params" if slots >= spec.num_csx else "num_csx",
            )
        groups += (ReplicaGroup(Role.WORKER, workers, demand=1),)
    return ReplicaPlan(groups=groups, model_bytes=model_bytes, wafer_bytes=need.total)


def _check_wafer(need: WaferNeed, strategy: str, largest: int) -> None:
    """Refuse a job whose CS-2s need more than the largest wafer of the pool holds."""
    if need.total <= largest:
        return
    if strategy == PIPELINE:
        mode, advice = "pipelined", "use runconfig.execution_strategy weight_streaming"
    else:
        mode, advice = "weight-streaming", "use more CS-2s or a smaller train_input.batch_size"
    raise InsufficientCapacity(
        f"the model needs {gigabytes(need.total)} on a CS-2's wafer in {mode} mode "
        f"({describe(need)}) but a CS-2 holds {gigabytes(largest)}; {advice}",
        field="params",
    )


def _pipelined_groups(spec: JobSpec) -> tuple[ReplicaGroup, ...]:
    """A pipelined job is its chief and one CS-2 that holds the whole model: no MemoryX, no
    SwarmX (the article scales out with weight streaming only)."""
    if spec.num_csx != 1:
        raise InvalidSpec(
            f"num_csx={spec.num_csx}: runconfig.execution_strategy pipeline runs on one CS-2; "
            "use weight_streaming to train on several",
            field="num_csx",
        )
    return (ReplicaGroup(Role.CHIEF, 1), ReplicaGroup(Role.CS2, 1, demand=1))


def _streaming_groups(
    spec: JobSpec, model_bytes: int, pool: PoolShape
) -> tuple[ReplicaGroup, ...]:
    """chief, num_csx CS-2s, the MemoryX that hold the model's bytes, the SwarmX that fan out
    to the CS-2s."""
    if not pool.memoryx or not pool.swarmx:
        raise InsufficientCapacity("the cluster has no MemoryX or no SwarmX nodes")
    node_bytes, memx = pool.memoryx_bytes, pool.memoryx
    memx_count = max(1, math.ceil(model_bytes / node_bytes))
    if memx_count > memx:
        raise InsufficientCapacity(
            f"the model needs {model_bytes} bytes of MemoryX but the cluster has "
            f"{node_bytes * memx} ({memx} nodes of {node_bytes}); make it smaller",
            field="params",
        )
    per_memx = math.ceil(model_bytes / memx_count)

    fanout = pool.fanout
    swarm_count = math.ceil(spec.num_csx / fanout)
    if swarm_count > pool.swarmx:
        raise InsufficientCapacity(
            f"num_csx={spec.num_csx} needs {swarm_count} SwarmX nodes of {fanout} ports but the "
            f"cluster has {pool.swarmx}",
            field="num_csx",
        )
    per_swarm = math.ceil(spec.num_csx / swarm_count)
    return (
        ReplicaGroup(Role.CHIEF, 1),
        ReplicaGroup(Role.CS2, spec.num_csx, demand=1),
        ReplicaGroup(Role.MEMORYX, memx_count, demand=per_memx),
        ReplicaGroup(Role.SWARMX, swarm_count, demand=per_swarm),
    )
