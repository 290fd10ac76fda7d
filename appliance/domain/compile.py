"""Compile (validate-only) mode: what a job would stream, without reserving anything.

The report lists the streamed units (layers) with their tensors (the first MAX_LISTED_UNITS of
them: a 500,000-layer file made a 16 MB report no client accepts; the totals count them all),
the parameter and MemoryX bytes, the replica plan, what a CS-2's wafer must hold in each
execution mode against the pool's largest wafer (domain/wafer.py), and the bytes one training
step moves between roles. Weight streaming broadcasts each unit once per entry of
`weight_schedule.training_order` (forward, the tied head's units, backward in reverse): MemoryX
to each SwarmX, each SwarmX to its CS-2s; each unit's gradient goes back up the same way once.
A pipelined job keeps the model on its one CS-2 and moves nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from appliance.domain.inventory import Node, NodeKind
from appliance.domain.model_shapes import BYTES_PER_PARAM, head_units, memory_bytes, unit_shapes
from appliance.domain.params import PIPELINE
from appliance.domain.plan import ReplicaPlan, Role, plan_replicas
from appliance.domain.spec import JobSpec
from appliance.domain.wafer import WAFER_BYTES, WEIGHT_STREAMING, WaferNeed, wafer_needs
from appliance.domain.weight_schedule import training_order

_NO_NEED = WaferNeed(0, 0, 0, 0)

MAX_LISTED_UNITS = 1000


@dataclasses.dataclass(frozen=True)
class StreamedUnit:
    index: int
    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    parameters: int


@dataclasses.dataclass(frozen=True)
class CompileReport:
    model: str
    units: tuple[StreamedUnit, ...]
    parameter_bytes: int
    memory_bytes: int
    plan: ReplicaPlan
    bytes_memoryx_to_swarmx: int
    bytes_swarmx_to_cs2: int
    bytes_cs2_to_swarmx: int
    bytes_swarmx_to_memoryx: int
    unit_count: int = 0  # every streamed unit; `units` lists the first MAX_LISTED_UNITS
    # What one CS-2's wafer holds pipelined (the job on one CS-2) and weight streaming (with
    # the job's num_csx), against the pool's largest wafer.
    wafer_pipelined: WaferNeed = _NO_NEED
    wafer_streaming: WaferNeed = _NO_NEED
    wafer_bytes: int = WAFER_BYTES

    @property
    def parameter_count(self) -> int:
        """Every streamed unit's parameters (float32 weights, so a quarter of their bytes)."""
        return self.parameter_bytes // BYTES_PER_PARAM

    @property
    def bytes_per_step(self) -> int:
        return (
            self.bytes_memoryx_to_swarmx + self.bytes_swarmx_to_cs2
            + self.bytes_cs2_to_swarmx + self.bytes_swarmx_to_memoryx
        )  # fmt: skip


def compile_job(spec: JobSpec, pool: Sequence[Node]) -> CompileReport:
    """Validate the spec against the model code and the pool; raise InvalidSpec or
    InsufficientCapacity exactly as a submit would."""
    params = spec.typed_params
    plan = plan_replicas(spec, pool)
    units = tuple(
        StreamedUnit(
            index=i,
            tensors=tuple(shapes.items()),
            parameters=sum(math.prod(shape) for shape in shapes.values()),
        )
        for i, shapes in enumerate(unit_shapes(params))
    )
    weights = sum(u.parameters for u in units) * BYTES_PER_PARAM
    listed = units[:MAX_LISTED_UNITS]
    swarmx = plan.group(Role.SWARMX).count
    if params.runconfig.execution_strategy == PIPELINE:
        broadcast = gradients = 0  # the model stays on the wafer
    else:
        broadcast = BYTES_PER_PARAM * sum(
            units[i].parameters for i in training_order(len(units), head_units(params))
        )
        gradients = weights
    return CompileReport(
        model=str(spec.params["model"].get("name", "fc_mnist")),
        units=listed,
        unit_count=len(units),
        parameter_bytes=weights,
        memory_bytes=memory_bytes(params),
        plan=plan,
        bytes_memoryx_to_swarmx=broadcast * swarmx,
        bytes_swarmx_to_cs2=broadcast * spec.num_csx,
        bytes_cs2_to_swarmx=gradients * spec.num_csx,
        bytes_swarmx_to_memoryx=gradients * swarmx,
        wafer_pipelined=wafer_needs(params, 1, PIPELINE),
        wafer_streaming=wafer_needs(params, spec.num_csx, WEIGHT_STREAMING),
        wafer_bytes=max(n.wafer_bytes for n in pool if n.kind is NodeKind.SYSTEM),
    )


def count_in_words(count: int) -> str:
    """A parameter count as people say it: `1.32 B`, `124.4 M`, `269.3 K`, `987`."""
    for scale, unit, digits in ((10**9, "B", 2), (10**6, "M", 1), (10**3, "K", 1)):
        if count >= scale:
            return f"{count / scale:.{digits}f} {unit}"
    return str(count)
