"""Usage accounting in the store: one aggregate statement per report (domain/usage.py says
what each number means).

Every number of a report comes from one SELECT, so it sees one snapshot: an attempt that ends
while the report runs is counted as held (jobs and their placements) or as ended (a row of
job_attempts), never both and never neither. The statement unions three kinds of fact rows,
each charged to its job's key (the user, the account group, "-" for none, or the queue):

- ended attempts (job_attempts) that overlap the window, were scheduled in it or ended in it:
  the seconds of their hold inside the window times what they held (systems; MemoryX bytes);
  their queue wait when they were scheduled in the window; a preemption (ended back in the
  queue with a preempting job) or a restart (back in the queue for any other reason) when
  they ended in the window;
- current attempts (jobs in SCHEDULED, INITIALIZING or RUNNING; what they hold is in their
  placements): their hold from scheduling to now, and their wait when scheduled in the
  window. An attempt is written to job_attempts by the move that ends it, in the same
  transaction that releases its placements, so no attempt is ever in both kinds;
- jobs that ended in the window (finished_at), by final phase.

A time is in the window when since <= t < until. The p50 and p95 of the waits are nearest-rank
(the ceil(p*n)-th smallest of a key's n waits): ROW_NUMBER over the key's waits in order and
COUNT of them pick the one row whose rank r has 100*(r-1) < P*n <= 100*r (P the percentile),
integer arithmetic on which SQLite and PostgreSQL agree (no PERCENTILE_CONT on SQLite).

Attempts recorded before migration 0007 have their systems counted (from their list of
systems) but no MemoryX bytes, no queued_at (0: no wait) and no preempted_by (a preemption then
counts as a restart). Attempts and jobs scheduled before migration 0005 have no scheduled_at
(0): their hold is unknown and not counted.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Float,
    Integer,
    Select,
    SQLColumnExpression,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    null,
    or_,
    select,
    union_all,
)

from appliance.domain.inventory import NodeKind
from appliance.domain.phases import Phase
from appliance.domain.usage import UsageBy, UsageQuery, UsageRow
from appliance.store.base import StoreBase
from appliance.store.tables import HOLDING_PHASES, AttemptRow, JobRow, NodeRow, PlacementRow

NO_GROUP = "-"
NO_ARRAY = "-"  # the key of the jobs of no array, by array
_Time = SQLColumnExpression[float]  # seconds since the epoch
_Number = ColumnElement[Any]  # a sum's term: seconds, amount x seconds, a count
_Rows = Select[*tuple[Any, ...]]
_SINCE = bindparam("since", type_=Float)
_UNTIL = bindparam("until", type_=Float)
_NOW = bindparam("now", type_=Float)
_ZERO_SECONDS = literal_column("0.0", Float)
_ZERO = literal_column("0", Integer)
_NO_WAIT = cast(null(), Float)


class UsageStore(StoreBase):
    """JobStore's part for usage accounting."""

    def usage(self, query: UsageQuery, now: float) -> list[UsageRow]:
        """Usage per key over `query`'s window, current holds counted up to `now`; only keys
        with something in the window, sorted by key."""
        params = {"since": query.since, "until": query.until, "now": now}
        with self._sessions() as s:
            rows = s.execute(_report(query.by), params).all()
        return sorted((_row(r) for r in rows), key=lambda row: row.key)


def _row(r: Any) -> UsageRow:
    return UsageRow(
        key=r.key, system_hours=float(r.system_seconds) / 3600,
        memoryx_gib_hours=float(r.memoryx_byte_seconds) / 2**30 / 3600,
        succeeded=int(r.succeeded), failed=int(r.failed), cancelled=int(r.cancelled),
        wait_p50_seconds=float(r.wait_p50 or 0.0), wait_p95_seconds=float(r.wait_p95 or 0.0),
        preemptions=int(r.preemptions), restarts=int(r.restarts), attempts=int(r.attempts),
        timed_out=int(r.timed_out),
    )  # fmt: skip


@functools.cache
def _report(by: UsageBy) -> _Rows:
    """The report by `by`, on the bound parameters since, until and now."""
    facts = union_all(_ended_attempts(by), _current_attempts(by), _ended_jobs(by)).subquery()
    untimed = case((facts.c.wait.is_(None), 1), else_=0)  # waits first, in order
    ranked = select(
        facts,
        func.row_number()
        .over(partition_by=facts.c.key, order_by=(untimed, facts.c.wait))
        .label("rank"),
        func.count(facts.c.wait).over(partition_by=facts.c.key).label("waits"),
    ).subquery()
    sums = {
        name: func.sum(ranked.c[name]).label(name)
        for name in ("system_seconds", "memoryx_byte_seconds", "succeeded", "failed",
                     "cancelled", "preemptions", "restarts", "timed_out")
    }  # fmt: skip
    attempts = func.count(ranked.c.wait)
    events = sums["succeeded"] + sums["failed"] + sums["cancelled"] + sums["timed_out"]
    events += sums["preemptions"] + sums["restarts"]
    return (
        select(
            ranked.c.key, *sums.values(), attempts.label("attempts"),
            _nearest_rank(ranked, 50).label("wait_p50"),
            _nearest_rank(ranked, 95).label("wait_p95"),
        )
        .group_by(ranked.c.key)
        .having(or_(sums["system_seconds"] > 0, sums["memoryx_byte_seconds"] > 0, events > 0,
                    attempts > 0))
    )  # fmt: skip


def _nearest_rank(ranked: Any, percent: int) -> ColumnElement[float]:
    """The wait of rank ceil(percent/100 * waits) of the key (NULL: no wait)."""
    rank, waits = ranked.c.rank, ranked.c.waits
    return func.max(
        case(
            (
                and_(
                    ranked.c.wait.is_not(None),
                    rank * 100 >= waits * percent,
                    (rank - 1) * 100 < waits * percent,
                ),
                ranked.c.wait,
            ),
        )
    )


def _key(by: UsageBy) -> SQLColumnExpression[str]:
    if by is UsageBy.USER:
        return JobRow.user
    if by is UsageBy.GROUP:
        return case((JobRow.account_group == "", NO_GROUP), else_=JobRow.account_group)
    if by is UsageBy.ARRAY:
        return case((JobRow.array_id == "", NO_ARRAY), else_=JobRow.array_id)
    return JobRow.queue


def _in_window(time: _Time) -> ColumnElement[bool]:
    return and_(time >= _SINCE, time < _UNTIL)


def _overlap(start: _Time, end: _Time) -> ColumnElement[float]:
    """Seconds of [start, end] inside the window (0 when apart); CASE for greatest/least,
    which SQLite spells max/min."""
    begins = case((start > _SINCE, start), else_=_SINCE)
    ends = case((end < _UNTIL, end), else_=_UNTIL)
    return case((ends > begins, ends - begins), else_=_ZERO_SECONDS)


def _wait(scheduled_at: _Time, queued_at: _Time) -> ColumnElement[float]:
    """The attempt's queue wait when it was scheduled in the window (else NULL)."""
    return case(
        (and_(_in_window(scheduled_at), queued_at > 0), scheduled_at - queued_at),
        else_=_NO_WAIT,
    )


def _facts(
    key: SQLColumnExpression[str],
    system_seconds: _Number = _ZERO_SECONDS,
    memoryx_byte_seconds: _Number = _ZERO_SECONDS,
    succeeded: _Number = _ZERO,
    failed: _Number = _ZERO,
    cancelled: _Number = _ZERO,
    preemptions: _Number = _ZERO,
    restarts: _Number = _ZERO,
    wait: _Number = _NO_WAIT,
    timed_out: _Number = _ZERO,
) -> _Rows:
    """One kind of fact rows, its columns in the union's order."""
    return select(
        key.label("key"), system_seconds.label("system_seconds"),
        memoryx_byte_seconds.label("memoryx_byte_seconds"), succeeded.label("succeeded"),
        failed.label("failed"), cancelled.label("cancelled"),
        preemptions.label("preemptions"), restarts.label("restarts"), wait.label("wait"),
        timed_out.label("timed_out"),
    )  # fmt: skip


def _ended_attempts(by: UsageBy) -> _Rows:
    a = AttemptRow
    # An attempt with no scheduled_at (before migration 0005) held for an unknown time.
    hold = case((a.scheduled_at > 0, _overlap(a.scheduled_at, a.ended_at)), else_=0.0)
    requeued = and_(a.ended_in == Phase.QUEUED.value, _in_window(a.ended_at))
    return (
        _facts(
            _key(by),
            system_seconds=a.system_count * hold,
            memoryx_byte_seconds=a.memoryx_bytes * hold,
            preemptions=case((and_(requeued, a.preempted_by != ""), 1), else_=0),
            restarts=case((and_(requeued, a.preempted_by == ""), 1), else_=0),
            wait=_wait(a.scheduled_at, a.queued_at),
        )
        .join(JobRow, JobRow.id == a.job_id)
        # Overlapping, scheduled in or ended in the window: all began before its end and
        # ended at or after its start.
        .where(a.ended_at >= _SINCE, a.scheduled_at < _UNTIL)
    )


def _current_attempts(by: UsageBy) -> _Rows:
    held = (
        select(
            PlacementRow.job_id,
            func.sum(case((NodeRow.kind == NodeKind.SYSTEM.value, 1), else_=0)).label("systems"),
            func.sum(
                case((NodeRow.kind == NodeKind.MEMORYX.value, PlacementRow.amount), else_=0)
            ).label("memoryx_bytes"),
        )
        .join(NodeRow, NodeRow.name == PlacementRow.node)
        .group_by(PlacementRow.job_id)
        .subquery()
    )
    hold = _overlap(JobRow.scheduled_at, _NOW)
    return (
        _facts(
            _key(by),
            system_seconds=func.coalesce(held.c.systems, 0) * hold,
            memoryx_byte_seconds=func.coalesce(held.c.memoryx_bytes, 0) * hold,
            wait=_wait(JobRow.scheduled_at, JobRow.queued_at),
        )
        .select_from(JobRow)
        .join(held, held.c.job_id == JobRow.id, isouter=True)
        .where(
            JobRow.phase.in_(HOLDING_PHASES), JobRow.scheduled_at > 0, JobRow.scheduled_at < _UNTIL
        )
    )


def _ended_jobs(by: UsageBy) -> _Rows:
    def ended_in(phase: Phase) -> ColumnElement[int]:
        return case((JobRow.phase == phase.value, 1), else_=0)

    final = (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT)
    return _facts(
        _key(by),
        succeeded=ended_in(Phase.SUCCEEDED),
        failed=ended_in(Phase.FAILED),
        cancelled=ended_in(Phase.CANCELLED),
        timed_out=ended_in(Phase.TIMEOUT),
    ).where(JobRow.phase.in_([p.value for p in final]), _in_window(JobRow.finished_at))
