"""Queue definitions in the store, what each queue holds and waits for, and its fair-share usage.

Queues come from the queues file and from admins at run time. The file is applied when it
changes (its digest differs from the one last applied): then it replaces every definition,
run-time ones included, except that a queue with jobs waiting or running is kept until it is
empty. While the file is unchanged (a restart), run-time changes stand. So the two never
fight silently: the file wins when it is edited, and `source` says where each definition
came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence

from sqlalchemy import delete, func, select, tuple_, update
from sqlalchemy.orm import Session

from appliance.domain.errors import Conflict, NotFound
from appliance.domain.fair_share import Usage, held
from appliance.domain.inventory import NodeKind
from appliance.domain.phases import Phase
from appliance.domain.queues import DEFAULT_QUEUE, QueueSpec, Source, builtin_default
from appliance.store.base import IN_LIST_SIZE, StoreBase
from appliance.store.tables import (
    HOLDING_PHASES,
    AttemptRow,
    ClusterMetaRow,
    JobRow,
    NodeRow,
    PlacementRow,
    QueueRow,
    QueueUsageRow,
)

QUEUES_FILE_DIGEST = "queues_file_digest"
SPECS_MAX_AGE = 2.0  # seconds a copy of the definitions serves the checks of a submit
_WAITING_OR_HOLDING = [Phase.QUEUED.value, *HOLDING_PHASES]
# How many ended attempts one fold takes in (the rest on the next pass).
FOLD_BATCH = 5_000


@dataclasses.dataclass(frozen=True)
class QueueLoad:
    """What a queue's jobs hold and how many wait or run."""

    systems: int = 0
    memoryx_bytes: int = 0
    pending: int = 0
    running: int = 0  # holding resources (SCHEDULED, INITIALIZING, RUNNING)


@dataclasses.dataclass(frozen=True)
class FileApplied:
    """What applying the queues file did."""

    applied: bool  # False: the file is unchanged since it was last applied
    kept: tuple[str, ...] = ()  # queues the file drops that still have jobs


class QueueDefStore(StoreBase):
    """JobStore's part for queues. Every change of the definitions takes one lock (a row of
    cluster_meta) first, so two admins' changes are checked against each other, never side
    by side.

    The definitions are also kept as last read (`cached_queue_specs`), for the checks of a
    submit: a read per submit waited on the database behind the group-commit writer (~5 ms
    each, a third of a submit's cost). The copy is dropped by every change this store writes,
    and is at most SPECS_MAX_AGE old (a definition changed by another coordinator, which only
    a past leader could have made). What a submit writes is checked again in its transaction
    (create_jobs: the queue must still exist), so the copy only speeds up the common case."""

    _specs_cache: tuple[float, dict[str, QueueSpec]] | None = None
    _specs_generation = 0

    def queue_specs(self) -> list[QueueSpec]:
        """Every queue, the default one included, by name (a small table: read each time)."""
        generation = self._specs_generation
        with self._sessions() as s:
            specs = _specs(s)
        if generation == self._specs_generation:  # no change was written while it was read
            self._specs_cache = (time.monotonic(), {q.name: q for q in specs})
        return specs

    def cached_queue_specs(self) -> dict[str, QueueSpec] | None:
        """The definitions by name as last read by `queue_specs`, if none changed since and
        the read is under SPECS_MAX_AGE old; else None (read them)."""
        cached = self._specs_cache
        if cached is None or time.monotonic() - cached[0] > SPECS_MAX_AGE:
            return None
        return cached[1]

    @contextlib.contextmanager
    def _changing(self) -> Iterator[Session]:
        """A transaction that may change the definitions: the kept copy is dropped once it
        ends (a read that overlapped it is not kept either: its generation is old)."""
        try:
            with self._sessions.begin() as s:
                yield s
        finally:
            self._specs_generation += 1
            self._specs_cache = None

    def apply_queues_file(
        self, specs: Sequence[QueueSpec], digest: str, check: Callable[[list[QueueSpec]], object]
    ) -> FileApplied:
        """Make the stored queues the file's when the file changed since last applied. A
        queue the file drops that still has jobs is kept with no quota until they end.
        `check` vets the result (quotas within the pool) and raises to refuse it."""
        with self._changing() as s:
            meta = _lock(s)
            if meta.value == digest:
                return FileApplied(False)
            busy = _busy_queues(s)
            existing = {r.name: r for r in s.scalars(select(QueueRow))}
            wanted = {q.name for q in specs}
            kept = [
                dataclasses.replace(
                    _spec(existing[n]), systems=0, memoryx_bytes=0, source=Source.KEPT
                )
                for n in sorted(existing)
                if n not in wanted and n in busy
            ]
            check([*specs, *kept])
            s.execute(delete(QueueRow))
            s.add_all(_row(spec) for spec in [*specs, *kept])
            meta.value = digest
        return FileApplied(True, tuple(q.name for q in kept))

    def put_queue(
        self,
        name: str,
        build: Callable[[QueueSpec | None], QueueSpec],
        check: Callable[[list[QueueSpec]], object],
    ) -> QueueSpec:
        """Create or change queue `name` to build(its current definition, None if new);
        `check` vets all the queues after (and raises to refuse)."""
        with self._changing() as s:
            _lock(s)
            row = s.get(QueueRow, name)
            spec = build(_spec(row) if row is not None else None)
            check([*(q for q in _specs(s) if q.name != name), spec])
            if row is not None:
                s.delete(row)
                s.flush()
            s.add(_row(spec))
        return spec

    def delete_queue(self, name: str) -> None:
        """Remove an empty queue; NotFound or Conflict (it has jobs, or is the default one)."""
        if name == DEFAULT_QUEUE:
            raise Conflict(
                "the default queue always exists; set its fields instead", field="queue"
            )
        with self._changing() as s:
            _lock(s)
            # Locked before its jobs are counted: a submit adding a job to it (which holds
            # the row FOR SHARE) ends first and is counted, or waits and finds it gone.
            row = s.get(QueueRow, name, with_for_update=True)
            if row is None:
                raise NotFound(f"queue {name} not found", field="queue")
            load = _loads(s).get(name, QueueLoad())
            if load.pending or load.running:
                raise Conflict(
                    f"queue {name} has {load.pending} job(s) waiting and {load.running} "
                    "running; delete it once they end (or cancel them)",
                    field="queue",
                )
            s.delete(row)

    def sweep_kept_queues(self) -> list[str]:
        """Delete the queues the queues file dropped whose last job has ended."""
        with self._changing() as s:
            _lock(s)
            kept = set(s.scalars(select(QueueRow.name).where(QueueRow.source == Source.KEPT)))
            gone = sorted(kept - _busy_queues(s))
            if gone:
                s.execute(delete(QueueRow).where(QueueRow.name.in_(gone)))
        return gone

    def queue_loads(self) -> dict[str, QueueLoad]:
        with self._sessions() as s:
            return _loads(s)

    def fold_usage(self, now: float, half_life: float) -> int:
        """Add the usage of attempts that ended since the last fold to their queues' decayed
        usage, each exactly once (the attempts are marked in the same transaction); returns
        how many were folded."""
        with self._sessions.begin() as s:
            rows = s.execute(
                select(
                    AttemptRow.job_id, AttemptRow.attempt, JobRow.queue, AttemptRow.system_count,
                    AttemptRow.memoryx_bytes, AttemptRow.scheduled_at, AttemptRow.ended_at,
                )
                .join(JobRow, JobRow.id == AttemptRow.job_id)
                .where(AttemptRow.folded.is_(False))
                .order_by(AttemptRow.job_id, AttemptRow.attempt)
                .limit(FOLD_BATCH)
                .with_for_update(of=AttemptRow)
            ).all()  # fmt: skip
            if not rows:
                return 0
            added: dict[str, Usage] = {}
            for r in rows:
                if r.scheduled_at <= 0:  # scheduled before attempts were timed: unknown
                    continue
                at = max(now, r.ended_at)  # never clip an attempt that ends "after" now
                usage = held(
                    r.system_count, r.memoryx_bytes, r.scheduled_at, r.ended_at, at, half_life
                )
                added[r.queue] = added.get(r.queue, Usage(as_of=at)).plus(usage, half_life)
            stored = {
                u.queue: u
                for u in s.scalars(
                    select(QueueUsageRow).order_by(QueueUsageRow.queue).with_for_update()
                )
            }
            for queue, usage in sorted(added.items()):
                row = stored.get(queue)
                if row is None:
                    row = QueueUsageRow(queue=queue, system_seconds=0.0,
                                        memoryx_byte_seconds=0.0, as_of=usage.as_of)  # fmt: skip
                    s.add(row)
                total = _usage(row).plus(usage, half_life)
                row.system_seconds = total.system_seconds
                row.memoryx_byte_seconds = total.memoryx_byte_seconds
                row.as_of = total.as_of
            keys = [(r.job_id, r.attempt) for r in rows]
            for start in range(0, len(keys), IN_LIST_SIZE // 2):
                chunk = keys[start : start + IN_LIST_SIZE // 2]
                s.execute(
                    update(AttemptRow)
                    .where(tuple_(AttemptRow.job_id, AttemptRow.attempt).in_(chunk))
                    .values(folded=True)
                )
        return len(rows)

    def queue_usage(self, now: float, half_life: float) -> dict[str, Usage]:
        """Each queue's decayed usage at `now`: its ended attempts (as folded) and what its
        jobs hold now since they got it."""
        holding = (
            select(
                JobRow.queue, JobRow.scheduled_at,
                func.sum(PlacementRow.amount).filter(NodeRow.kind == NodeKind.MEMORYX.value),
                func.count().filter(NodeRow.kind == NodeKind.SYSTEM.value),
            )
            .join(PlacementRow, PlacementRow.job_id == JobRow.id)
            .join(NodeRow, NodeRow.name == PlacementRow.node)
            .group_by(JobRow.id, JobRow.queue, JobRow.scheduled_at)
        )  # fmt: skip
        with self._sessions() as s:
            usage = {
                r.queue: _usage(r).at(now, half_life) for r in s.scalars(select(QueueUsageRow))
            }
            for queue, since, memoryx, systems in s.execute(holding):
                now_held = held(int(systems or 0), int(memoryx or 0), since, now, now, half_life)
                usage[queue] = usage.get(queue, Usage(as_of=now)).plus(now_held, half_life)
        return usage


def _lock(s: Session) -> ClusterMetaRow:
    """The row every change of the queues locks first; it holds the queues file's digest."""
    row = s.get(ClusterMetaRow, QUEUES_FILE_DIGEST, with_for_update=True)
    if row is None:  # a store made before the migration added it
        row = ClusterMetaRow(key=QUEUES_FILE_DIGEST, value="")
        s.add(row)
        s.flush()
    return row


def _specs(s: Session) -> list[QueueSpec]:
    specs = {r.name: _spec(r) for r in s.scalars(select(QueueRow))}
    specs.setdefault(DEFAULT_QUEUE, builtin_default())
    return sorted(specs.values(), key=lambda q: q.name)


def _busy_queues(s: Session) -> set[str]:
    return set(
        s.scalars(select(JobRow.queue).where(JobRow.phase.in_(_WAITING_OR_HOLDING)).distinct())
    )


def _loads(s: Session) -> dict[str, QueueLoad]:
    """Per queue: what its jobs hold, and how many wait and how many hold resources."""
    counts = s.execute(
        select(JobRow.queue, JobRow.phase, func.count())
        .where(JobRow.phase.in_(_WAITING_OR_HOLDING))
        .group_by(JobRow.queue, JobRow.phase)
    ).all()
    held_rows = s.execute(
        select(JobRow.queue, NodeRow.kind, func.count(), func.sum(PlacementRow.amount))
        .join(PlacementRow, PlacementRow.job_id == JobRow.id)
        .join(NodeRow, NodeRow.name == PlacementRow.node)
        .where(NodeRow.kind.in_([NodeKind.SYSTEM.value, NodeKind.MEMORYX.value]))
        .group_by(JobRow.queue, NodeRow.kind)
    ).all()
    loads: dict[str, QueueLoad] = {}
    for queue, phase, count in counts:
        load = loads.get(queue, QueueLoad())
        if phase == Phase.QUEUED.value:
            load = dataclasses.replace(load, pending=load.pending + count)
        else:
            load = dataclasses.replace(load, running=load.running + count)
        loads[queue] = load
    for queue, kind, count, amount in held_rows:
        load = loads.get(queue, QueueLoad())
        if kind == NodeKind.SYSTEM.value:
            load = dataclasses.replace(load, systems=int(count))
        else:
            load = dataclasses.replace(load, memoryx_bytes=int(amount or 0))
        loads[queue] = load
    return loads


def _usage(row: QueueUsageRow) -> Usage:
    return Usage(row.system_seconds, row.memoryx_byte_seconds, row.as_of)


def _spec(row: QueueRow) -> QueueSpec:
    return QueueSpec(
        name=row.name, systems=row.systems, memoryx_bytes=row.memoryx_bytes, weight=row.weight,
        borrow_systems=row.borrow_systems, borrow_memoryx_bytes=row.borrow_memoryx_bytes,
        lend=row.lend, groups=tuple(row.groups), source=Source(row.source),
        updated_by=row.updated_by, updated_at=row.updated_at,
        max_running_jobs_per_user=row.max_running_jobs_per_user,
        max_queued_jobs_per_user=row.max_queued_jobs_per_user,
        max_systems_per_user=row.max_systems_per_user,
        default_time_limit=row.default_time_limit, max_time_limit=row.max_time_limit,
    )  # fmt: skip


def _row(spec: QueueSpec) -> QueueRow:
    return QueueRow(
        name=spec.name, systems=spec.systems, memoryx_bytes=spec.memoryx_bytes,
        weight=spec.weight, borrow_systems=spec.borrow_systems,
        borrow_memoryx_bytes=spec.borrow_memoryx_bytes, lend=spec.lend,
        groups=list(spec.groups), source=spec.source.value, updated_by=spec.updated_by,
        updated_at=spec.updated_at, max_running_jobs_per_user=spec.max_running_jobs_per_user,
        max_queued_jobs_per_user=spec.max_queued_jobs_per_user,
        max_systems_per_user=spec.max_systems_per_user,
        default_time_limit=spec.default_time_limit, max_time_limit=spec.max_time_limit,
    )  # fmt: skip
