"""A job as one document: the shape REST sends and csctl prints (-o json, -o yaml), built here
once for both (REST's pydantic models in server/rest/models.py are checked against it).

The job is named by `id` ("wsjob-…"), as in REST and the gRPC message. csctl's documents carry
`name` beside it, the same value, for one release (deprecated: csctl named the job `name` before
#31; read `id`). Moments are RFC 3339 UTC strings, null when not (yet) happened
(domain/timestamps.py); the spec is domain/spec_document.py's.
"""

from __future__ import annotations

from typing import Any

from appliance.domain.arrays import TaskOf
from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.holds import Hold
from appliance.domain.job import Attempt, Job, Lease, Progress, Replica
from appliance.domain.spec_document import spec_document
from appliance.domain.timestamps import rfc3339
from appliance.domain.wafer import execution_strategy_of


def job_document(job: Job, *, parsed_params: bool = False) -> dict[str, Any]:
    """The job as plain data. The spec's params are `params_yaml`, the text as submitted (empty
    in list views), or with `parsed_params` `params`, the mapping it holds (csctl's full view)."""
    spec = spec_document(job.spec)
    if parsed_params:
        text = spec.pop("params_yaml")
        spec["params"] = load_bounded(text, "params") if text else {}
    return {
        "id": job.id,
        "user": job.user,
        "spec": spec,
        "execution_strategy": execution_strategy_of(job.spec),
        "phase": job.phase.value,
        "reason": job.reason,
        "pending_reason": job.pending_reason,
        "reason_code": job.reason_code,
        "pending_reason_code": job.pending_reason_code,
        "queue_position": job.queue_position,
        "estimated_start": rfc3339(job.estimated_start),
        "systems": list(job.systems),
        "attempt": job.attempt,
        "restarts": job.restarts,
        "attempts": [attempt_document(a) for a in job.attempts],
        "dependents": list(job.dependents),
        "progress": progress_document(job.progress),
        "created_at": rfc3339(job.created_at),
        "updated_at": rfc3339(job.updated_at),
        "started_at": rfc3339(job.started_at),
        "finished_at": rfc3339(job.finished_at),
        "replicas": [replica_document(r) for r in job.replicas],
        "lease": lease_document(job.lease) if job.lease is not None else None,
        "array": task_document(job.array) if job.array is not None else None,
        "hold": hold_document(job.hold) if job.hold is not None else None,
    }


def task_document(task: TaskOf) -> dict[str, Any]:
    """A job's place in its array (its sweep overrides are its params' values, shown only
    where its params are: `csctl get array` to those who may see them)."""
    return {"array_id": task.array_id, "index": task.index, "cap": task.cap}


def hold_document(hold: Hold) -> dict[str, Any]:
    return {"kind": hold.kind.value, "by": hold.by, "suspended": hold.suspended}


def progress_document(p: Progress) -> dict[str, Any]:
    return {
        "step": p.step,
        "num_steps": p.num_steps,
        "loss": p.loss,
        "steps_per_second": p.steps_per_second,
        "samples_per_second": p.samples_per_second,
        "reported_at": rfc3339(p.reported_at),
        "checkpoint_step": p.checkpoint_step,
        "resumed_from_step": p.resumed_from_step,
        "learning_rate": p.learning_rate,
        "eval_loss": p.eval_loss,
        "eval_accuracy": p.eval_accuracy,
        "eval_samples": p.eval_samples,
    }


def attempt_document(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "scheduled_at": rfc3339(a.scheduled_at),
        "started_at": rfc3339(a.started_at),
        "ended_at": rfc3339(a.ended_at),
        "systems": list(a.systems),
        "reason": a.reason,
        "ended_in": a.ended_in.value,
        "resumed_from": a.resumed_from,
    }


def replica_document(r: Replica) -> dict[str, Any]:
    return {
        "name": r.name,
        "role": r.role.value,
        "index": r.index,
        "phase": r.phase.value,
        "node": r.node,
        "address": r.address,
        "pid": r.pid,
        "exit_code": r.exit_code,
        "message": r.message,
        "log_tail": r.log_tail,
        "data_plane": r.data_plane,
    }


def lease_document(lease: Lease) -> dict[str, Any]:
    return {
        "lease_seconds": lease.lease_seconds,
        "expires_at": rfc3339(lease.expires_at),
        "holder": lease.holder,
    }
