"""Requeue requests: a job holding resources that is to stop and run again.

A requeue is asked for (a retryable failure, a preemption, a system taken away) by writing the
reason on the job, bound to its current attempt, before anything is torn down; the reconciler
then tears the gang down and moves the job back to QUEUED with the phase writer, which clears
the request in the same transaction. So a coordinator that dies midway finds the request when
it comes back and finishes it, and a request never outlives the attempt it was made for.
A preemption first asks the chief for a checkpoint (`checkpoint_by` is the deadline); the step
it wrote is recorded here when its report arrives.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Connection, bindparam, insert, select, update
from sqlalchemy.orm import Session, aliased

from appliance.domain.backlog import RunningJob
from appliance.domain.errors import NotFound
from appliance.domain.job import EventKind, JobEvent
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason, ReasonCode, as_reason, notes, said
from appliance.domain.requeues import RequeueRequest, StopState
from appliance.domain.spec import Priority
from appliance.store.base import StoreBase, in_chunks
from appliance.store.phase_writes import write_phases
from appliance.store.rows import PLAN_AS_READ, plan_from_json, spec_of
from appliance.store.tables import HOLDING_PHASES, JobEventRow, JobRow, PlacementRow

# Preemptions waiting for the victim's checkpoint, with their preemptor: built once (a sweep
# runs it on every wake-up; building the aliased join each time cost more than running it).
_VICTIM, _PREEMPTOR = aliased(JobRow), aliased(JobRow)
_AWAITING_CHECKPOINT = (
    select(
        _VICTIM.id, _VICTIM.phase, _VICTIM.priority, _VICTIM.preempted_by, _VICTIM.queue,
        _PREEMPTOR.phase.label("by_phase"), _PREEMPTOR.priority.label("by_priority"),
        _PREEMPTOR.queue.label("by_queue"),
    )
    .join(_PREEMPTOR, _PREEMPTOR.id == _VICTIM.preempted_by, isouter=True)
    .where(
        _VICTIM.phase.in_(HOLDING_PHASES), _VICTIM.stop_reason != "",
        _VICTIM.preempted_by != "",
        _VICTIM.checkpoint_by > 0, _VICTIM.checkpoint_step.is_(None),
    )
)  # fmt: skip


# What a StopState is made of (StopState.of_row); the statement is built once, as it is read
# on every replica heartbeat and report.
STOP_STATE_COLUMNS = (
    JobRow.phase, JobRow.attempt, JobRow.stop_reason, JobRow.checkpoint_by,
    JobRow.checkpoint_step,
)  # fmt: skip
_STOP_STATE = select(*STOP_STATE_COLUMNS).where(JobRow.id == bindparam("job_id"))
_STOP_STATES_OF = select(JobRow.id, *STOP_STATE_COLUMNS).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)


def read_stop_states(
    conn: Connection | Session, job_ids: Sequence[str], *, lock: bool = False
) -> dict[str, StopState]:
    """The StopState of each of the jobs that exist; with `lock`, their rows locked for the
    rest of the transaction (where the database has row locks: not SQLite)."""
    stmt = _STOP_STATES_OF.with_for_update() if lock else _STOP_STATES_OF
    states: dict[str, StopState] = {}
    for ids in in_chunks(sorted(set(job_ids))):
        for row in conn.execute(stmt, {"ids": ids}):
            states[row.id] = StopState.of_row(row)
    return states


class RequeueStore(StoreBase):
    """JobStore's part for requeue requests and what preemption decides on."""

    def request_requeue(
        self,
        job_id: str,
        attempt: int,
        reason: Reason | str,
        now: float,
        *,
        checkpoint_by: float = 0.0,
        preempted_by: str = "",
        retry: bool = False,
    ) -> tuple[bool, JobEvent | None]:
        """Ask for `attempt` of the job to be torn down and the job queued again with `reason`.

        Written only while that attempt holds resources and no other requeue is asked for.
        `retry`: a restart after a failure, which counts against the job's max_restarts.
        Asking for a checkpoint first (the requeue then waits for it) records an event, the job
        staying in its phase. Returns whether it was written, and that event if any."""
        reason = as_reason(reason)
        with self._sessions.begin() as s:
            self.fence.check(s.connection())  # asks for replicas to stop: the leader's alone
            written = s.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.attempt == attempt,
                    JobRow.phase.in_(HOLDING_PHASES),
                    JobRow.stop_reason == "",
                )
                .values(
                    stop_reason=reason.message,
                    stop_reason_code=reason.code_text,
                    checkpoint_by=checkpoint_by,
                    preempted_by=preempted_by,
                    preemptions=JobRow.preemptions + (1 if preempted_by else 0),
                    retries=JobRow.retries + (1 if retry else 0),
                    version=JobRow.version + 1,
                )
                .returning(JobRow.phase)
            ).first()
            if written is None:
                return False, None
            if not checkpoint_by:
                return True, None
            note = reason.but(checkpoint_within=checkpoint_by - now)
            return True, _record_note(s, job_id, Phase(written.phase), note, now)

    def withdraw_moot_preemptions(self, now: float) -> list[JobEvent]:
        """Preemptions still waiting for the victim's checkpoint whose preemptor no longer
        waits (cancelled, or started elsewhere) or, preempting by priority (within its queue),
        no longer has the higher priority: the victims go on as if never asked. (A reclaim,
        by a job of another queue, does not go by priority.) Returns the events recorded on
        them."""
        events: list[JobEvent] = []
        with self._sessions.begin() as s:
            for row in s.execute(_AWAITING_CHECKPOINT).all():
                if row.by_phase != Phase.QUEUED.value:
                    why = f"{row.preempted_by} is {(row.by_phase or 'gone').lower()}"
                elif row.by_queue == row.queue and row.by_priority >= row.priority:
                    why = f"{row.preempted_by} no longer has the higher priority"
                else:
                    continue
                asked = f"preemption by {row.preempted_by}"
                withdrawn = s.execute(
                    update(JobRow)
                    .where(
                        JobRow.id == row.id, JobRow.preempted_by == row.preempted_by,
                        JobRow.checkpoint_step.is_(None), JobRow.stop_reason != "",
                    )
                    .values(
                        stop_reason="", stop_reason_code="", checkpoint_by=0.0, preempted_by="",
                        preemptions=JobRow.preemptions - 1, version=JobRow.version + 1,
                    )
                )  # fmt: skip
                if not withdrawn.rowcount:  # type: ignore[attr-defined]
                    continue
                note = said(ReasonCode.REQUEUE_WITHDRAWN, asked=asked, why=why)
                events.append(_record_note(s, row.id, Phase(row.phase), note, now))
        return events

    def requeue_now(
        self, job_id: str, attempt: int, reason: Reason | str, now: float
    ) -> list[PhaseChange | NotFound]:
        """Move `attempt` of the job back to QUEUED with `reason`, only while that attempt still
        holds resources with a requeue asked for (so a late or repeated task can never requeue
        the next attempt); [] when it does not. One transaction with the phase writer's."""
        return end_stopping_attempt(self, job_id, attempt, Phase.QUEUED, as_reason(reason), now)

    def give_up_checkpoint(self, job_id: str, attempt: int, why: Reason) -> bool:
        """The checkpoint asked of `attempt` cannot come (a replica of the gang died): the
        requeue goes ahead at once, from the newest complete checkpoint, saying why (the
        notes of `why`, added to the reason the requeue was asked with)."""
        with self._sessions.begin() as s:
            result = s.execute(
                update(JobRow)
                .where(*_awaiting_checkpoint(job_id, attempt))
                .values(
                    stop_reason=JobRow.stop_reason + notes(why.params), checkpoint_by=0.0,
                    version=JobRow.version + 1,
                )
            )  # fmt: skip
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def record_checkpoint_now(
        self, job_id: str, attempt: int, step: int, now: float
    ) -> tuple[bool, JobEvent | None]:
        """The chief of `attempt` wrote the checkpoint asked of it, at `step`: (recorded, None).
        At the job's last step there is nothing left to resume, so the requeue is withdrawn
        and the job finishes where it is: (True, the event that says so). (False, None) when
        no checkpoint was awaited from that attempt."""
        with self._sessions.begin() as s:
            row = s.execute(
                select(JobRow.phase, JobRow.spec, JobRow.stop_reason, JobRow.preempted_by)
                .where(*_awaiting_checkpoint(job_id, attempt))
                .with_for_update()
            ).first()
            if row is None:
                return False, None
            if step < spec_of(row.spec)["num_steps"]:
                s.execute(
                    update(JobRow)
                    .where(JobRow.id == job_id)
                    .values(checkpoint_step=step, version=JobRow.version + 1)
                )
                return True, None
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(
                    stop_reason="", stop_reason_code="", checkpoint_by=0.0, preempted_by="",
                    preemptions=JobRow.preemptions - (1 if row.preempted_by else 0),
                    version=JobRow.version + 1,
                )
            )  # fmt: skip
            asked = f"preemption by {row.preempted_by}" if row.preempted_by else row.stop_reason
            why = "the job reached its last step"
            note = said(ReasonCode.REQUEUE_WITHDRAWN, asked=asked, why=why)
            return True, _record_note(s, job_id, Phase(row.phase), note, now)

    def requeue_requests(self) -> list[RequeueRequest]:
        """Every requeue asked for and not yet done."""
        stmt = select(
            JobRow.id, JobRow.phase, JobRow.attempt, JobRow.stop_reason, JobRow.checkpoint_by,
            JobRow.checkpoint_step, JobRow.progress, JobRow.preempted_by, JobRow.stop_reason_code,
        ).where(JobRow.phase.in_(HOLDING_PHASES), JobRow.stop_reason != "")  # fmt: skip
        with self._sessions() as s:
            return [
                RequeueRequest(
                    r.id,
                    Phase(r.phase),
                    r.attempt,
                    r.stop_reason,
                    r.checkpoint_by,
                    r.checkpoint_step,
                    int((r.progress or {}).get("checkpoint_step", 0)),
                    r.preempted_by,
                    r.stop_reason_code,
                )
                for r in s.execute(stmt)
            ]

    def stop_state(self, job_id: str) -> StopState | None:
        """The job's phase, attempt and whether it is being requeued; None if unknown."""
        with self._sessions() as s:
            row = s.execute(_STOP_STATE, {"job_id": job_id}).first()
        return None if row is None else StopState.of_row(row)

    def stop_states(self, job_ids: Sequence[str]) -> dict[str, StopState]:
        """The StopState of each of the jobs that exist (a replica's many waits, one read)."""
        with self._sessions() as s:
            return read_stop_states(s, job_ids)

    def running_jobs(self, min_run_seconds: float) -> list[RunningJob]:
        """Every job holding resources, with what it holds, as preemption decides on it."""
        jobs = select(
            JobRow.id, JobRow.priority, JobRow.spec, JobRow.preemptions, JobRow.phase,
            JobRow.attempt,
            JobRow.started_at, JobRow.scheduled_at, JobRow.progress, JobRow.stop_reason,
            JobRow.preempted_by, JobRow.queue, JobRow.created_at, PLAN_AS_READ,
        ).where(JobRow.phase.in_(HOLDING_PHASES))  # fmt: skip
        holdings: dict[str, list[tuple[str, int]]] = {}
        with self._sessions() as s:
            rows = s.execute(jobs).all()
            for job_id, node, amount in s.execute(
                select(PlacementRow.job_id, PlacementRow.node, PlacementRow.amount)
            ):
                holdings.setdefault(job_id, []).append((node, int(amount)))
        running = []
        for r in rows:
            progress = r.progress or {}
            at_risk = (
                int(progress.get("step", 0)) - int(progress.get("checkpoint_step", 0))
                if r.phase == Phase.RUNNING.value
                else 0
            )
            began = r.started_at or r.scheduled_at
            spec = spec_of(r.spec)
            running.append(
                RunningJob(
                    job_id=r.id,
                    priority=Priority(r.priority),
                    holdings=tuple(holdings.get(r.id, ())),
                    preemptible=spec["preemptible"],
                    attempt=r.attempt,
                    protected_until=began + min_run_seconds if r.preemptions else 0.0,
                    at_risk=max(0, at_risk),
                    stopping=bool(r.stop_reason),
                    preempted_by=r.preempted_by,
                    checkpointable=r.phase == Phase.RUNNING.value and bool(spec["model_dir"]),
                    queue=r.queue,
                    scheduled_at=r.scheduled_at,
                    created_at=r.created_at,
                    elastic=plan_from_json(r.plan) if spec.get("num_csx_min") else None,
                )
            )
        return running


def end_stopping_attempt(
    store: StoreBase, job_id: str, attempt: int, target: Phase, reason: Reason, now: float
) -> list[PhaseChange | NotFound]:
    """Move `attempt` of the job to `target` (QUEUED: requeued; TIMEOUT: its time limit) with
    `reason`, only while that attempt still holds resources with a stop asked for; [] when it
    does not. One transaction with the phase writer's."""
    with store._sessions.begin() as s:
        row = s.execute(
            select(JobRow.phase)
            .where(
                JobRow.id == job_id,
                JobRow.attempt == attempt,
                JobRow.phase.in_(HOLDING_PHASES),
                JobRow.stop_reason != "",
            )
            .with_for_update()
        ).first()
        if row is None:
            return []
        move = PhaseMove(job_id, target, reason, Phase(row.phase))
        return write_phases(s.connection(), [move], now, fence=store.fence)


def _awaiting_checkpoint(job_id: str, attempt: int) -> tuple[ColumnElement[bool], ...]:
    """`attempt` of the job still holds resources and waits for the checkpoint asked of it."""
    return (
        JobRow.id == job_id,
        JobRow.attempt == attempt,
        JobRow.phase.in_(HOLDING_PHASES),
        JobRow.checkpoint_by > 0,
        JobRow.checkpoint_step.is_(None),
    )


def _record_note(s: Session, job_id: str, phase: Phase, note: Reason, now: float) -> JobEvent:
    """An event that says something happened to the job while it stays in `phase`."""
    text, code = note.message, note.code_text
    seq = s.execute(
        insert(JobEventRow)
        .values(
            job_id=job_id,
            time=now,
            from_phase=phase.value,
            to_phase=phase.value,
            reason=text,
            reason_code=code,
        )
        .returning(JobEventRow.seq)
    ).scalar_one()
    return JobEvent(job_id, EventKind.PHASE, now, seq, phase, phase, reason=text, reason_code=code)
