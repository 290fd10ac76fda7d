"""Hand-written conversions between domain types and the generated protobuf messages.

The one place both the server's servicers and the user-node client translate the wire format,
so no protobuf type leaks past server/grpc or client/.
"""

from __future__ import annotations

from appliance._proto.v1 import cluster_pb2, common_pb2
from appliance.domain.arrays import TaskOf
from appliance.domain.compile import CompileReport, StreamedUnit
from appliance.domain.holds import Hold, HoldKind
from appliance.domain.job import (
    Attempt,
    EventKind,
    Job,
    JobEvent,
    Lease,
    Progress,
    Replica,
    ReplicaPhase,
)
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.spec import Mode, Priority
from appliance.domain.wafer import WAFER_BYTES, WaferNeed
from appliance.protocol.spec_pb import MODE_TO_PB, PRIORITY_TO_PB
from appliance.protocol.spec_pb import spec_from_pb as spec_from_pb  # derived from the fields
from appliance.protocol.spec_pb import spec_to_pb as spec_to_pb

_PHASE_TO_PB = {p: common_pb2.Phase.Value(f"PHASE_{p.value}") for p in Phase}
_PHASE_FROM_PB: dict[int, Phase] = {int(v): k for k, v in _PHASE_TO_PB.items()}
_MODE_TO_PB = MODE_TO_PB
_MODE_FROM_PB: dict[int, Mode] = {int(v): k for k, v in _MODE_TO_PB.items()}
_PRIO_TO_PB = PRIORITY_TO_PB
_PRIO_FROM_PB: dict[int, Priority] = {int(v): k for k, v in _PRIO_TO_PB.items()}
_RPHASE_TO_PB = {
    r: common_pb2.ReplicaPhase.Value(f"REPLICA_PHASE_{r.value}") for r in ReplicaPhase
}
_RPHASE_FROM_PB = {v: k for k, v in _RPHASE_TO_PB.items()}
_KIND_TO_PB = {
    EventKind.PHASE: cluster_pb2.JOB_EVENT_KIND_PHASE,
    EventKind.PROGRESS: cluster_pb2.JOB_EVENT_KIND_PROGRESS,
}
_KIND_FROM_PB = {v: k for k, v in _KIND_TO_PB.items()}


def phase_to_pb(phase: Phase) -> common_pb2.Phase.ValueType:
    return _PHASE_TO_PB[phase]


def phase_from_pb(value: int) -> Phase | None:
    return _PHASE_FROM_PB.get(value)


def mode_to_pb(mode: Mode) -> common_pb2.Mode.ValueType:
    return _MODE_TO_PB[mode]


def mode_from_pb(value: int) -> Mode | None:
    """None for MODE_UNSPECIFIED or an unknown number."""
    return _MODE_FROM_PB.get(value)


def priority_to_pb(priority: Priority) -> common_pb2.Priority.ValueType:
    return _PRIO_TO_PB[priority]


def priority_from_pb(value: int) -> Priority | None:
    return _PRIO_FROM_PB.get(value)


def progress_to_pb(p: Progress) -> common_pb2.Progress:
    return common_pb2.Progress(
        step=p.step,
        num_steps=p.num_steps,
        loss=p.loss,
        steps_per_second=p.steps_per_second,
        samples_per_second=p.samples_per_second,
        reported_at=p.reported_at,
        checkpoint_step=p.checkpoint_step,
        resumed_from_step=p.resumed_from_step,
        learning_rate=p.learning_rate,
        eval_loss=p.eval_loss,
        eval_accuracy=p.eval_accuracy,
        eval_samples=p.eval_samples,
    )


def progress_from_pb(msg: common_pb2.Progress) -> Progress:
    return Progress(
        step=msg.step,
        num_steps=msg.num_steps,
        loss=msg.loss,
        steps_per_second=msg.steps_per_second,
        samples_per_second=msg.samples_per_second,
        reported_at=msg.reported_at,
        checkpoint_step=msg.checkpoint_step,
        resumed_from_step=msg.resumed_from_step,
        learning_rate=msg.learning_rate,
        eval_loss=msg.eval_loss if msg.HasField("eval_loss") else None,
        eval_accuracy=msg.eval_accuracy if msg.HasField("eval_accuracy") else None,
        eval_samples=msg.eval_samples,
    )


def replica_to_pb(r: Replica) -> cluster_pb2.Replica:
    return cluster_pb2.Replica(
        name=r.name,
        role=r.role.value,
        index=r.index,
        phase=_RPHASE_TO_PB[r.phase],
        node=r.node,
        address=r.address,
        pid=r.pid,
        has_exit_code=r.exit_code is not None,
        exit_code=r.exit_code or 0,
        message=r.message,
        log_tail=r.log_tail,
        data_plane=r.data_plane,
    )


def replica_from_pb(job_id: str, msg: cluster_pb2.Replica) -> Replica:
    return Replica(
        job_id=job_id,
        name=msg.name,
        role=Role(msg.role),
        index=msg.index,
        node=msg.node,
        phase=_RPHASE_FROM_PB.get(msg.phase, ReplicaPhase.PENDING),
        address=msg.address,
        pid=msg.pid,
        exit_code=msg.exit_code if msg.has_exit_code else None,
        message=msg.message,
        log_tail=msg.log_tail,
        data_plane=msg.data_plane,
    )


def job_to_pb(job: Job) -> cluster_pb2.Job:
    msg = cluster_pb2.Job(
        id=job.id,
        user=job.user,
        spec=spec_to_pb(job.spec),
        phase=_PHASE_TO_PB[job.phase],
        reason=job.reason,
        pending_reason=job.pending_reason,
        queue_position=job.queue_position,
        systems=job.systems,
        progress=progress_to_pb(job.progress),
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        lease=lease_to_pb(job.lease) if job.lease else None,
        attempt=job.attempt,
        restarts=job.restarts,
        estimated_start=job.estimated_start,
        reason_code=job.reason_code,
        pending_reason_code=job.pending_reason_code,
    )
    if job.hold is not None:
        msg.held_by, msg.hold, msg.suspended = job.hold.by, job.hold.kind, job.hold.suspended
    if job.replicas:  # a summary has none of these
        msg.replicas.extend(replica_to_pb(r) for r in job.replicas)
    if job.attempts:
        msg.attempts.extend(attempt_to_pb(a) for a in job.attempts)
    if job.dependents:
        msg.dependents.extend(job.dependents)
    if job.array is not None:
        task = job.array
        msg.array_id, msg.array_index, msg.array_cap = task.array_id, task.index, task.cap
    return msg


def lease_to_pb(lease: Lease) -> cluster_pb2.Lease:
    return cluster_pb2.Lease(
        lease_seconds=lease.lease_seconds, expires_at=lease.expires_at, holder=lease.holder
    )


def lease_from_pb(msg: cluster_pb2.Lease) -> Lease:
    return Lease(lease_seconds=msg.lease_seconds, expires_at=msg.expires_at, holder=msg.holder)


def job_from_pb(msg: cluster_pb2.Job) -> Job:
    return Job(
        id=msg.id,
        user=msg.user,
        spec=spec_from_pb(msg.spec),
        phase=phase_from_pb(msg.phase) or Phase.QUEUED,
        created_at=msg.created_at,
        updated_at=msg.updated_at,
        reason=msg.reason,
        pending_reason=msg.pending_reason,
        queue_position=msg.queue_position,
        systems=tuple(msg.systems),
        progress=progress_from_pb(msg.progress),
        started_at=msg.started_at,
        finished_at=msg.finished_at,
        replicas=tuple(replica_from_pb(msg.id, r) for r in msg.replicas),
        lease=lease_from_pb(msg.lease) if msg.HasField("lease") else None,
        attempt=msg.attempt,
        restarts=msg.restarts,
        attempts=tuple(attempt_from_pb(a) for a in msg.attempts),
        dependents=tuple(msg.dependents),
        estimated_start=msg.estimated_start,
        reason_code=msg.reason_code,
        pending_reason_code=msg.pending_reason_code,
        array=TaskOf(msg.array_id, msg.array_index, msg.array_cap, {}) if msg.array_id else None,
        hold=hold_from_pb(msg.hold, msg.held_by, msg.suspended),
    )


def hold_from_pb(kind: str, by: str, suspended: bool) -> Hold | None:
    """A job's hold as a Job message carries it (an unknown kind: a user's)."""
    if not kind:
        return None
    return Hold(_HOLD_KINDS.get(kind, HoldKind.USER), by, suspended)


_HOLD_KINDS = {k.value: k for k in HoldKind}


def attempt_to_pb(a: Attempt) -> cluster_pb2.Attempt:
    return cluster_pb2.Attempt(
        number=a.number, scheduled_at=a.scheduled_at, started_at=a.started_at,
        ended_at=a.ended_at, systems=list(a.systems), reason=a.reason,
        ended_in=phase_to_pb(a.ended_in), resumed_from=a.resumed_from,
    )  # fmt: skip


def attempt_from_pb(msg: cluster_pb2.Attempt) -> Attempt:
    return Attempt(
        number=msg.number, scheduled_at=msg.scheduled_at, started_at=msg.started_at,
        ended_at=msg.ended_at, systems=tuple(msg.systems), reason=msg.reason,
        ended_in=phase_from_pb(msg.ended_in) or Phase.QUEUED, resumed_from=msg.resumed_from,
    )  # fmt: skip


def event_to_pb(ev: JobEvent) -> cluster_pb2.JobEvent:
    msg = cluster_pb2.JobEvent(
        job_id=ev.job_id, kind=_KIND_TO_PB[ev.kind], seq=ev.seq, time=ev.time, reason=ev.reason,
        reason_code=ev.reason_code,
    )  # fmt: skip
    if ev.from_phase is not None:
        msg.from_phase = phase_to_pb(ev.from_phase)
    if ev.to_phase is not None:
        msg.to_phase = phase_to_pb(ev.to_phase)
    if ev.progress is not None:
        msg.progress.CopyFrom(progress_to_pb(ev.progress))
    return msg


def event_from_pb(msg: cluster_pb2.JobEvent) -> JobEvent:
    kind = _KIND_FROM_PB.get(msg.kind, EventKind.PHASE)
    return JobEvent(
        job_id=msg.job_id,
        kind=kind,
        time=msg.time,
        seq=msg.seq,
        from_phase=phase_from_pb(msg.from_phase),
        to_phase=phase_from_pb(msg.to_phase),
        reason=msg.reason,
        progress=progress_from_pb(msg.progress) if kind is EventKind.PROGRESS else None,
        reason_code=msg.reason_code,
    )


def compile_report_to_pb(report: CompileReport) -> cluster_pb2.CompileReport:
    return cluster_pb2.CompileReport(
        model=report.model,
        units=[
            cluster_pb2.StreamedUnit(
                index=u.index,
                tensors=[cluster_pb2.TensorShape(name=n, shape=list(s)) for n, s in u.tensors],
                parameters=u.parameters,
            )
            for u in report.units
        ],
        parameter_bytes=report.parameter_bytes,
        memory_bytes=report.memory_bytes,
        replicas=[
            cluster_pb2.ReplicaCount(role=g.role.value, count=g.count, demand=g.demand)
            for g in report.plan.groups
        ],
        bytes_memoryx_to_swarmx=report.bytes_memoryx_to_swarmx,
        bytes_swarmx_to_cs2=report.bytes_swarmx_to_cs2,
        bytes_cs2_to_swarmx=report.bytes_cs2_to_swarmx,
        bytes_swarmx_to_memoryx=report.bytes_swarmx_to_memoryx,
        bytes_per_step=report.bytes_per_step,
        unit_count=report.unit_count,
        wafer_pipelined=_wafer_pb(report.wafer_pipelined),
        wafer_streaming=_wafer_pb(report.wafer_streaming),
        wafer_bytes=report.wafer_bytes,
    )


def _wafer_pb(need: WaferNeed) -> cluster_pb2.WaferNeed:
    return cluster_pb2.WaferNeed(
        weights=need.weights,
        gradients=need.gradients,
        optimizer_state=need.optimizer_state,
        activations=need.activations,
    )


def _wafer_of(msg: cluster_pb2.WaferNeed) -> WaferNeed:
    return WaferNeed(msg.weights, msg.gradients, msg.optimizer_state, msg.activations)


def compile_report_from_pb(msg: cluster_pb2.CompileReport) -> CompileReport:
    return CompileReport(
        model=msg.model,
        units=tuple(
            StreamedUnit(
                index=u.index,
                tensors=tuple((t.name, tuple(t.shape)) for t in u.tensors),
                parameters=u.parameters,
            )
            for u in msg.units
        ),
        parameter_bytes=msg.parameter_bytes,
        memory_bytes=msg.memory_bytes,
        plan=ReplicaPlan(
            groups=tuple(ReplicaGroup(Role(r.role), r.count, r.demand) for r in msg.replicas),
            model_bytes=msg.memory_bytes,
        ),
        bytes_memoryx_to_swarmx=msg.bytes_memoryx_to_swarmx,
        bytes_swarmx_to_cs2=msg.bytes_swarmx_to_cs2,
        bytes_cs2_to_swarmx=msg.bytes_cs2_to_swarmx,
        bytes_swarmx_to_memoryx=msg.bytes_swarmx_to_memoryx,
        unit_count=msg.unit_count or len(msg.units),
        wafer_pipelined=_wafer_of(msg.wafer_pipelined),
        wafer_streaming=_wafer_of(msg.wafer_streaming),
        wafer_bytes=msg.wafer_bytes or WAFER_BYTES,
    )
