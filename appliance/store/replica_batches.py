"""Replica writes of many jobs in one transaction: what a busy coordinator's replicas say at once.

A replica's life is three writes (started, registered, exited). Written one transaction each,
they were most of a short job's cost in the store. These take the calls that arrived together
(services/replicas.py group-commits them) and write them together, with the same rules as
one at a time:

- a start moves a replica PENDING -> STARTED only (a late event cannot move it back);
- a registration of an attempt that is not the job's current one is refused, and the first
  address a replica registers wins (a second one at another address could otherwise draw the
  job's peers, and their data-plane token, to itself);
- an exit is written only for the job's current attempt while no requeue is asked for; the
  caller handles anything else one event at a time, as before (loops/reconciling.py).

Every job touched gets its version bumped once (cached full views are keyed by it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, case, literal, or_, select, update

from appliance.domain.errors import NotFound, stale_attempt
from appliance.domain.job import Progress, ReplicaPhase
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Phase
from appliance.domain.plan import CHIEF_REPLICA
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.domain.requeues import StopState
from appliance.store.base import StoreBase, in_chunks
from appliance.store.phase_writes import write_phases
from appliance.store.requeues import read_stop_states
from appliance.store.tables import HOLDING_PHASES, JobRow, ReplicaRow


@dataclasses.dataclass(frozen=True)
class Registration:
    """A replica of `attempt` says it serves at `address`."""

    job_id: str
    attempt: int
    replica: str
    address: str
    pid: int


@dataclasses.dataclass(frozen=True)
class Registered:
    """`taken`: the address the replica had already registered at (None: recorded);
    `all_ready`: every one of the job's `replicas` has registered."""

    taken: str | None
    all_ready: bool
    replicas: int
    # The job's move to RUNNING, made with the registration that completed its gang while
    # it was INITIALIZING (one still SCHEDULED is moved by its launch, loops/reconciling.py).
    change: PhaseChange | None = None


@dataclasses.dataclass(frozen=True)
class ReplicaExit:
    """A replica of `attempt` exited. `decisive`: its end may end the job (a non-zero code,
    or the chief), so the caller acts on it before any later exit of the job is written."""

    replica: str
    attempt: int
    exit_code: int | None
    message: str
    log_tail: str
    decisive: bool


@dataclasses.dataclass(frozen=True)
class ExitsWritten:
    """How many of a job's exits were written (a prefix, in order), and the job's state they
    were written against (None: no such job)."""

    count: int
    state: StopState | None
    # The job's move to SUCCEEDED, made with the exits when the last one written is the
    # chief's success while the job runs; any other decisive exit is the caller's to act on.
    change: PhaseChange | None = None


_REPLICAS_OF = select(
    ReplicaRow.job_id, ReplicaRow.name, ReplicaRow.address, ReplicaRow.phase
).where(ReplicaRow.job_id.in_(bindparam("ids", expanding=True)))
_JOBS = cast(Table, JobRow.__table__)
_BUMP = (
    update(_JOBS)
    .where(_JOBS.c.id.in_(bindparam("ids", expanding=True)))
    .values(version=_JOBS.c.version + 1)
)
# Core statements on the table: the ORM's bulk UPDATE (a list of parameter sets) only matches
# rows by primary key, and these add conditions.
_REPLICAS = cast(Table, ReplicaRow.__table__)
_REPLICA = (_REPLICAS.c.job_id == bindparam("b_job"), _REPLICAS.c.name == bindparam("b_name"))
# The pid recorded, and PENDING -> STARTED only (a replica that registered first stays READY).
_START = (
    update(_REPLICAS)
    .where(*_REPLICA)
    .values(
        pid=bindparam("b_pid"),
        phase=case(
            (_REPLICAS.c.phase == ReplicaPhase.PENDING.value, ReplicaPhase.STARTED.value),
            else_=_REPLICAS.c.phase,
        ),
    )
)
_CLAIM = (  # decided on the rows read (and locked) in the same transaction
    update(_REPLICAS)
    .where(*_REPLICA)
    .values(address=bindparam("b_address"), pid=bindparam("b_pid"), phase=ReplicaPhase.READY.value)
)
_EXIT = (
    update(_REPLICAS)
    .where(*_REPLICA)
    .values(
        phase=bindparam("b_phase"),
        exit_code=bindparam("b_code"),
        message=bindparam("b_message"),
        log_tail=bindparam("b_tail"),
    )
)


CHIEF_FINISHED = said(ReasonCode.COMPLETED)


def all_ready(replicas: int) -> Reason:
    """Why a job runs: every one of its replicas registered."""
    return said(ReasonCode.REPLICAS_READY, replicas=replicas)


def exit_phase(job_phase: Phase | None, exit_code: int | None) -> ReplicaPhase:
    """The phase a replica's exit leaves it in: a failure after the job ended is the
    teardown's doing (STOPPED), not the replica's."""
    if job_phase is not None and job_phase.terminal and exit_code != 0:
        return ReplicaPhase.STOPPED
    return ReplicaPhase.SUCCEEDED if exit_code == 0 else ReplicaPhase.FAILED


def exit_message(job_phase: Phase | None, exit_code: int | None, message: str) -> str:
    """What a replica's exit says: a replica the teardown stopped after the job succeeded
    (one the chief's "shutdown" missed) ended as it should, and says so."""
    if job_phase is Phase.SUCCEEDED and exit_code != 0:
        return "stopped by the teardown after the job succeeded" + (
            f" ({message})" if message else ""
        )
    return message


_PROGRESS = (
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("b_job"),
        _JOBS.c.attempt == bindparam("b_attempt"),
        # Spelled out: an IN list is an "expanding" parameter, which executemany refuses.
        or_(*(_JOBS.c.phase == literal(phase) for phase in HOLDING_PHASES)),
    )
    .values(
        progress=bindparam("b_progress"),
        resumed_from=bindparam("b_resumed"),
        version=_JOBS.c.version + 1,
    )
)


class ReplicaBatchStore(StoreBase):
    """JobStore's part for replica writes of many jobs at once."""

    def mark_started(self, started: Sequence[tuple[str, str, int | None]]) -> None:
        """(job, replica, pid) started: its pid recorded, PENDING -> STARTED."""
        if not started:
            return
        rows = [{"b_job": j, "b_name": n, "b_pid": pid} for j, n, pid in started]
        with self.engine.begin() as s:
            s.execute(_START, rows)
            self._bump(s, {j for j, _, _ in started})

    def register_replicas(
        self, batch: Sequence[Registration], now: float
    ) -> list[Registered | Exception]:
        """Record each registration (in order, each decided on its own: refused for an attempt
        that is not the job's, the address it has for a replica registered elsewhere), and
        move a job whose gang is complete from INITIALIZING to RUNNING; answers in order, an
        exception for a registration refused on its own."""
        jobs = sorted({r.job_id for r in batch})
        answers: list[Registered | Exception] = []
        with self.engine.begin() as s:
            states = self._states(s, jobs)
            replicas: dict[str, dict[str, list[str]]] = {}  # job -> name -> [address, phase]
            sqlite = self.engine.dialect.name == "sqlite"
            of_jobs = _REPLICAS_OF if sqlite else _REPLICAS_OF.with_for_update()
            for ids in in_chunks(jobs):
                for job_id, name, address, phase in s.execute(of_jobs, {"ids": ids}):
                    replicas.setdefault(job_id, {})[name] = [address, phase]
            claimed: set[str] = set()
            claims: list[dict[str, Any]] = []
            moves: dict[int, PhaseMove] = {}  # by the answer that completed the gang
            for r in batch:
                state = states.get(r.job_id)
                if state is not None and state.attempt != r.attempt:
                    answers.append(stale_attempt(r.job_id, r.attempt, state.attempt))
                    continue
                row = replicas.get(r.job_id, {}).get(r.replica)
                if row is None:
                    answers.append(NotFound(f"job {r.job_id} has no replica {r.replica}"))
                    continue
                if row[0] not in ("", r.address):  # the rows are this transaction's to write
                    answers.append(Registered(row[0], False, len(replicas[r.job_id])))
                    continue
                claims.append({"b_job": r.job_id, "b_name": r.replica, "b_address": r.address,
                               "b_pid": r.pid})  # fmt: skip
                row[:] = [r.address, ReplicaPhase.READY.value]
                claimed.add(r.job_id)
                gang = replicas[r.job_id].values()
                ready = all(phase == ReplicaPhase.READY.value for _, phase in gang)
                if ready and state is not None and state.phase is Phase.INITIALIZING:
                    reason = all_ready(len(gang))
                    moves[len(answers)] = PhaseMove(r.job_id, Phase.RUNNING, reason, state.phase)
                answers.append(Registered(None, ready, len(gang)))
            if claims:
                s.execute(_CLAIM, claims)
            self._bump(s, claimed)
            changes = self._move(s, list(moves.values()), now)
        for at, change in zip(moves, changes, strict=True):
            found = answers[at]
            if isinstance(change, PhaseChange) and isinstance(found, Registered):
                answers[at] = dataclasses.replace(found, change=change)
        return answers

    def record_exits(
        self, batch: Sequence[tuple[str, Sequence[ReplicaExit]]], now: float
    ) -> list[ExitsWritten]:
        """For each (job, its exits in order): write the exits of the job's current attempt
        while no requeue is asked for, up to and including the first decisive one, and move
        a running job whose chief finished to SUCCEEDED; answers in order. Nothing is written
        for a job being requeued, queued again or unknown."""
        answers: list[ExitsWritten] = []
        moves: dict[int, PhaseMove] = {}  # by the answer whose chief finished
        with self.engine.begin() as s:
            states = self._states(s, sorted({job_id for job_id, _ in batch}))
            rows: list[dict[str, Any]] = []
            written: set[str] = set()
            for job_id, exits in batch:
                state = states.get(job_id)
                count = 0
                if state is not None and not state.stopping and state.phase is not Phase.QUEUED:
                    for end in exits:
                        if not state.is_current(end.attempt):
                            break
                        rows.append({
                            "b_job": job_id, "b_name": end.replica,
                            "b_phase": exit_phase(state.phase, end.exit_code).value,
                            "b_code": end.exit_code,
                            "b_message": exit_message(state.phase, end.exit_code, end.message),
                            "b_tail": end.log_tail,
                        })  # fmt: skip
                        count += 1
                        written.add(job_id)
                        if end.decisive:
                            finished = end.replica == CHIEF_REPLICA and end.exit_code == 0
                            if finished and state.phase is Phase.RUNNING:
                                move = PhaseMove(
                                    job_id, Phase.SUCCEEDED, CHIEF_FINISHED, state.phase
                                )
                                moves[len(answers)] = move
                            break
                answers.append(ExitsWritten(count, state))
            if rows:
                s.execute(_EXIT, rows)
                self._bump(s, written)
            changes = self._move(s, list(moves.values()), now)
        for at, change in zip(moves, changes, strict=True):
            if isinstance(change, PhaseChange):
                answers[at] = dataclasses.replace(answers[at], change=change)
        return answers

    def set_progress(self, job_id: str, attempt: int, progress: Progress) -> bool:
        """Record the progress the chief of `attempt` reports, while that attempt holds its
        systems (also while it is being stopped: a checkpoint it reports then is the one its
        next attempt resumes from); False (nothing written) once the attempt is over: queued
        again, or the job terminal."""
        return self.record_progress([(job_id, attempt, progress)])[0][0]

    def record_progress(
        self, batch: Sequence[tuple[str, int, Progress]]
    ) -> list[tuple[bool, StopState | None]]:
        """For each (job, attempt, progress) a chief reports, in order: whether it was written
        (as JobStore.set_progress says when), and the job's state as it was before (what the
        chief is told to do next; None: no such job)."""
        answers: list[tuple[bool, StopState | None]] = []
        with self.engine.begin() as s:
            states = self._states(s, sorted({job_id for job_id, _, _ in batch}))
            rows = []
            for job_id, attempt, progress in batch:
                state = states.get(job_id)
                written = (
                    state is not None
                    and state.attempt == attempt
                    and state.phase.value in HOLDING_PHASES
                )
                answers.append((written, state))
                if written:
                    rows.append({
                        "b_job": job_id, "b_attempt": attempt,
                        "b_progress": dataclasses.asdict(progress),
                        "b_resumed": progress.resumed_from_step,
                    })  # fmt: skip
            if rows:
                s.execute(_PROGRESS, rows)
        return answers

    def _states(self, s: Connection, job_ids: Sequence[str]) -> dict[str, StopState]:
        """The StopState of each of the jobs that exist, their rows locked for the rest of the
        transaction where the database can (what is decided on them is written in it)."""
        return read_stop_states(s, job_ids, lock=self.engine.dialect.name != "sqlite")

    def _move(self, s: Connection, moves: list[PhaseMove], now: float) -> list[Any]:
        """The phase moves decided with the replicas' writes, through the one checked writer
        (store/phase_writes.py), in the same transaction."""
        return write_phases(s, moves, now, fence=self.fence) if moves else []

    def _bump(self, s: Connection, jobs: set[str]) -> None:
        for ids in in_chunks(sorted(jobs)):
            s.execute(_BUMP, {"ids": ids})
