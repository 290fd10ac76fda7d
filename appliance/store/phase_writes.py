"""How a job's phase is written: the checked, compare-and-set moves of JobStore.set_phase,
set_phases and schedule. Nothing but JobStore calls `write_phases`.

Every move is decided on the transition table (domain/phases.py) and written only while the
job is still in the phase it was decided on; a move written records its event and, when the
job leaves the resource-holding phases, releases its placements and records the attempt that
ended (a move back to QUEUED also drops that attempt's replica rows: the next schedule makes
new ones), all in the caller's transaction. Moving to SCHEDULED begins the next attempt.
Moves of many jobs cost one UPDATE per (source, target, reason) and one INSERT, with
statements built once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    ScalarSelect,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.sql.dml import ReturningUpdate, Update

from appliance.domain.errors import NotFound, job_not_found
from appliance.domain.inventory import NodeKind
from appliance.domain.job import EventKind, JobEvent, ReplicaPhase
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import HOLDS_RESOURCES, TERMINAL, Outcome, Phase, check_move
from appliance.store.base import in_chunks
from appliance.store.fence import Fence
from appliance.store.tables import (
    AttemptRow,
    JobEventRow,
    JobRow,
    NodeRow,
    PlacementRow,
    ReplicaRow,
)

_PHASES_OF = select(JobRow.id, JobRow.phase).where(JobRow.id.in_(bindparam("ids", expanding=True)))
_RELEASE = delete(PlacementRow).where(PlacementRow.job_id.in_(bindparam("ids", expanding=True)))
_LOCK = (
    select(JobRow.id)
    .where(JobRow.id.in_(bindparam("ids", expanding=True)))
    .order_by(JobRow.id)
    .with_for_update()
)
_RECORD = insert(JobEventRow).returning(JobEventRow.job_id, JobEventRow.seq)


def _held(kind: NodeKind, amount: ColumnElement[int]) -> ScalarSelect[int]:
    """What the job holds of nodes of `kind` (its placements, not yet released)."""
    return (
        select(func.coalesce(amount, 0))
        .select_from(PlacementRow)
        .join(NodeRow, NodeRow.name == PlacementRow.node)
        .where(PlacementRow.job_id == JobRow.id, NodeRow.kind == kind.value)
        .scalar_subquery()
    )


# The attempt the jobs `ids` just ended, as the move left their rows (attempt, times, systems,
# what it held) and why.
_RECORD_ATTEMPT = insert(AttemptRow).from_select(
    ["job_id", "attempt", "scheduled_at", "started_at", "ended_at", "systems", "reason",
     "ended_in", "resumed_from", "queued_at", "system_count", "memoryx_bytes", "preempted_by"],
    select(
        JobRow.id, JobRow.attempt, JobRow.scheduled_at, JobRow.started_at,
        bindparam("b_now"), JobRow.systems, bindparam("b_reason"), JobRow.phase,
        JobRow.resumed_from, JobRow.queued_at, _held(NodeKind.SYSTEM, func.count()),
        _held(NodeKind.MEMORYX, func.sum(PlacementRow.amount)), JobRow.preempted_by,
    ).where(JobRow.id.in_(bindparam("ids", expanding=True))),
)  # fmt: skip
_DROP_REPLICAS = delete(ReplicaRow).where(ReplicaRow.job_id.in_(bindparam("ids", expanding=True)))
# A job that timed out was torn down while it was being stopped, when replicas' exits are not
# recorded (store/replica_batches.py): its replicas that had not ended are the teardown's.
_LIVE = (ReplicaPhase.PENDING.value, ReplicaPhase.STARTED.value, ReplicaPhase.READY.value)
_STOP_REPLICAS = (
    update(ReplicaRow)
    .where(ReplicaRow.job_id.in_(bindparam("ids", expanding=True)), ReplicaRow.phase.in_(_LIVE))
    .values(phase=ReplicaPhase.STOPPED.value, pid=0, message="stopped at the job's time limit")
)
# A requeued job holds no system any more (its attempt row keeps the ones it had) and waits
# in the queue again from now.
_REQUEUED = (
    update(JobRow)
    .where(JobRow.id.in_(bindparam("ids", expanding=True)))
    .values(systems="", queued_at=bindparam("b_now"))
)


def write_phases(
    conn: Connection, moves: Sequence[PhaseMove], now: float, *, fence: Fence
) -> list[PhaseChange | NotFound]:
    """Apply `moves` in order, each checked on its own. An unknown job is a NotFound in its
    place; a job named twice sees the effect of its earlier move. Raises NotLeader, writing
    nothing, unless `fence` lets this coordinator write (store/fence.py)."""
    fence.check(conn)
    changes: list[PhaseChange | NotFound] = []
    for run in _distinct_runs(moves):
        changes += _write_distinct(conn, run, now)
    return changes


def _write_distinct(
    conn: Connection, moves: Sequence[PhaseMove], now: float
) -> list[PhaseChange | NotFound]:
    """Moves of distinct jobs. A move that names the phase it expects, and that the table
    allows from there, is written at once; the others read the job's phase first. A write
    that misses reads the phase after, to say why. So a batch of cancels is one UPDATE and
    one INSERT."""
    sources: dict[str, Phase] = {}  # the phase each move is written from
    for move in moves:
        expected = move.expected
        if expected is not None and check_move(expected, move.target, expected) is (
            Outcome.APPLIED
        ):
            sources[move.job_id] = expected
    current = _phases(conn, [m.job_id for m in moves if m.job_id not in sources])
    for move in moves:
        phase = current.get(move.job_id)
        if phase is not None and check_move(phase, move.target, move.expected) is (
            Outcome.APPLIED
        ):
            sources[move.job_id] = phase
    events = _write(conn, [m for m in moves if m.job_id in sources], sources, now)
    current.update(_phases(conn, [j for j in sources if j not in events]))
    changes: list[PhaseChange | NotFound] = []
    for move in moves:
        event = events.get(move.job_id)
        phase = current.get(move.job_id)
        if event is not None:
            changes.append(PhaseChange(Outcome.APPLIED, event))
        elif phase is None:
            changes.append(job_not_found(move.job_id))
        else:
            outcome = check_move(phase, move.target, move.expected)
            # Decided APPLIED but not written: the job left that phase meanwhile.
            changes.append(
                PhaseChange(outcome if outcome is not Outcome.APPLIED else Outcome.LOST)
            )
    return changes


def _phases(conn: Connection, job_ids: Sequence[str]) -> dict[str, Phase]:
    """The current phase of each of the jobs that exist."""
    found: dict[str, Phase] = {}
    for chunk in in_chunks(job_ids):
        rows = conn.execute(_PHASES_OF, {"ids": chunk})
        found.update((job_id, Phase(phase)) for job_id, phase in rows)
    return found


def _writes_reason(target: Phase) -> bool:
    """Whether a move to `target` writes its reason into the job's row (not only its event)."""
    return target in TERMINAL or target is Phase.QUEUED


def _write(
    conn: Connection, moves: Sequence[PhaseMove], sources: Mapping[str, Phase], now: float
) -> dict[str, JobEvent]:
    """Write each move if its job is still in its source phase; release what the jobs that
    left a resource-holding phase held; record an event for each move written. Returns the
    events by job. Moves that write the same values are one UPDATE (a scheduler pass's, each
    reserving other systems, too: those are written after, in one executemany)."""
    groups: dict[tuple[Phase, Phase, str, str], list[str]] = {}
    for move in moves:
        said = move.reason
        row_reason = (said.message, said.code_text) if _writes_reason(move.target) else ("", "")
        groups.setdefault((sources[move.job_id], move.target, *row_reason), []).append(move.job_id)
    by_job = {move.job_id: move for move in moves}
    if len(moves) > 1 and conn.dialect.name != "sqlite":
        # Lock the rows in id order first, as every multi-row writer does, so two writers
        # never wait for each other's rows (SQLite has one writer at a time).
        for chunk in in_chunks(sorted(m.job_id for m in moves)):
            conn.execute(_LOCK, {"ids": chunk})
    written: list[dict[str, Any]] = []
    released: list[str] = []
    for (source, target, reason, code), job_ids in groups.items():
        stmt = _move_stmt(target)
        params = {"b_source": source.value, "b_now": now, "b_reason": reason, "b_code": code}
        for chunk in in_chunks(job_ids):
            ids = [job_id for (job_id,) in conn.execute(stmt, {**params, "ids": chunk})]
            written += (
                {"job_id": job_id, "time": now, "from_phase": source.value,
                 "to_phase": target.value, "reason": by_job[job_id].reason.message,
                 "reason_code": by_job[job_id].reason.code_text}
                for job_id in ids
            )  # fmt: skip
            if source in HOLDS_RESOURCES and target not in HOLDS_RESOURCES:
                released += ids
                for part in in_chunks(ids):
                    attempt = {"ids": part, "b_now": now, "b_reason": reason}
                    conn.execute(_RECORD_ATTEMPT, attempt)
                    if target is Phase.QUEUED:
                        conn.execute(_DROP_REPLICAS, {"ids": part})
                        conn.execute(_REQUEUED, {"ids": part, "b_now": now})
                    elif target is Phase.TIMEOUT:
                        conn.execute(_STOP_REPLICAS, {"ids": part})
    for chunk in in_chunks(released):
        conn.execute(_RELEASE, {"ids": chunk})
    if not written:
        return {}
    _write_columns(conn, [by_job[w["job_id"]] for w in written])
    seqs = {job_id: seq for job_id, seq in conn.execute(_RECORD, written)}
    return {
        w["job_id"]: JobEvent(
            job_id=w["job_id"], kind=EventKind.PHASE, time=now, seq=seqs[w["job_id"]],
            from_phase=Phase(w["from_phase"]), to_phase=Phase(w["to_phase"]), reason=w["reason"],
            reason_code=w["reason_code"],
        )
        for w in written
    }  # fmt: skip


def _write_columns(conn: Connection, moves: Sequence[PhaseMove]) -> None:
    """The moves' own columns, for the jobs moved: one executemany per set of column names."""
    rows: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for move in moves:
        if move.columns:
            names = tuple(sorted(move.columns))
            values = {f"b_{name}": move.columns[name] for name in names}
            rows.setdefault(names, []).append({"b_id": move.job_id, **values})
    for names, params in rows.items():
        conn.execute(_columns_stmt(names), params)


@functools.cache
def _columns_stmt(names: tuple[str, ...]) -> Update:
    return (
        update(JobRow)
        .where(JobRow.id == bindparam("b_id"))
        .values({name: bindparam(f"b_{name}") for name in names})
    )


@functools.cache
def _move_stmt(target: Phase) -> ReturningUpdate[str]:
    """UPDATE of the jobs `ids` still in phase `b_source` to `target`, returning those moved.

    `phase || ''`: no index serves it, so the planner looks the ids up by key (SQLite without
    statistics would scan ix_jobs_phase, every queued row, for each batch).
    """
    now: BindParameter[float] = bindparam("b_now")
    values: dict[str, Any] = {"phase": target.value, "updated_at": now}
    values["version"] = JobRow.version + 1  # what a summary shows changed
    if target is Phase.SCHEDULED:  # the next attempt begins
        values["attempt"] = JobRow.attempt + 1
        values["scheduled_at"] = now
        values["started_at"] = 0.0
        values["resumed_from"] = 0
        values["preempted_by"] = ""  # kept with the attempt a preemption ended until now
    if target is Phase.RUNNING:
        values["started_at"] = now
    if target in TERMINAL:
        values["finished_at"] = now
        values.update(hold="", held_by="", suspended=False)  # an ended job waits for nothing
        values["reason"] = bindparam("b_reason")
        values["reason_code"] = bindparam("b_code")
        values["pending_reason"] = ""
        values["pending_reason_code"] = ""
    elif target is Phase.QUEUED:  # requeued: why, until the scheduler says why it waits
        values["pending_reason"] = bindparam("b_reason")
        values["pending_reason_code"] = bindparam("b_code")
        values["restarts"] = JobRow.restarts + 1
    else:
        values["pending_reason"] = ""
        values["pending_reason_code"] = ""
    if target not in HOLDS_RESOURCES:  # a requeue asked for is done (or moot)
        values.update(stop_reason="", stop_reason_code="", checkpoint_by=0.0, checkpoint_step=None)
        # The attempt's time RUNNING counts against the job's time limit (domain/time_limits.py).
        values["ran_seconds"] = JobRow.ran_seconds + case(
            (JobRow.started_at > 0, now - JobRow.started_at), else_=0.0
        )
    where = [
        JobRow.id.in_(bindparam("ids", expanding=True)),
        JobRow.phase + "" == bindparam("b_source"),
    ]
    if target is Phase.SCHEDULED:  # a job held since the pass decided on it stays queued
        where.append(JobRow.hold == "")
    return update(JobRow).where(*where).values(values).returning(JobRow.id)


def _distinct_runs(moves: Sequence[PhaseMove]) -> Iterator[Sequence[PhaseMove]]:
    """Consecutive runs of moves naming each job at most once (a job named again starts a new
    run, so its second move is decided on the phase its first one wrote)."""
    start = 0
    seen: set[str] = set()
    for index, move in enumerate(moves):
        if move.job_id in seen:
            yield moves[start:index]
            start, seen = index, set()
        seen.add(move.job_id)
    if start < len(moves):
        yield moves[start:]
