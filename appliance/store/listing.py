"""Listing jobs from the store: keyset pages newest first, keys, summaries, owners, and the
renderings of summaries kept across restarts.

A kept rendering is returned only for the very version it was rendered from, in the very form
(the code) that rendered it: every write that changes what a summary shows bumps the job's
version in its own transaction, and versions only grow, so a rendering kept under (job,
version) shows exactly that version's row, whoever saved it and however that coordinator
ended (the two are in one database, so a restored backup restores them together).
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Dialect, and_, bindparam, cast, func, or_, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite

from appliance.domain.auth import JobOwner
from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job
from appliance.domain.listing import DEFAULT_LIMIT, JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.store.base import IN_LIST_SIZE, StoreBase, in_chunks
from appliance.store.rows import SUMMARY_AS_READ, job_from_values
from appliance.store.tables import ACTIVE_PHASES_SQL, JobLabelRow, JobRenderingRow, JobRow

# Built once: a statement object carries its compiled form from call to call.
_SUMMARIES_OF = select(*SUMMARY_AS_READ, JobRow.version).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)


_R = JobRenderingRow
_RENDERINGS_IN = (
    select(_R.job_id, _R.version, _R.queued, _R.data)
    .where(_R.created_at.between(bindparam("lo"), bindparam("hi")), _R.form == bindparam("form"))
    .limit(bindparam("most"))
)
_RENDERINGS_OF = select(_R.job_id, _R.version, _R.queued, _R.data).where(
    tuple_(_R.created_at, _R.job_id).in_(bindparam("keys", expanding=True)),
    _R.form == bindparam("form"),
)

# Kept renderings: (key, rendering, queued).
Kept = tuple[JobKey, bytes, bool]


_OWNERS_OF = select(JobRow.id, JobRow.phase, JobRow.user, JobRow.groups).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)


class ListingStore(StoreBase):
    """JobStore's part for listing."""

    def list_job_keys(self, query: JobQuery) -> tuple[list[JobKey], str]:
        """One page of the jobs `query` matches, newest first (keyset-paginated), as keys: what
        a caller needs to reuse the summaries it already has (job_summaries reads the others);
        and the next page token ("" at the end). The page size is the caller's to check."""
        columns = (JobRow.id, JobRow.created_at, JobRow.version)  # covered by ix_jobs_created
        rows = self._driver_rows(_page_stmt(query, columns, self.engine.dialect.name))
        limit = query.limit if query.limit > 0 else DEFAULT_LIMIT
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, _encode_token(rows[-1][1], rows[-1][0])

    def job_summaries(self, job_ids: Sequence[str]) -> list[Job]:
        """Summaries of the given jobs, in no particular order (unknown ids are left out)."""
        return [job for _, job in self.keyed_summaries(job_ids)]

    def keyed_summaries(self, job_ids: Sequence[str]) -> Iterator[tuple[JobKey, Job]]:
        """The summaries of the given jobs with their keys as read (unknown ids are left out),
        one at a time: a caller that renders each as it comes holds one summary at a time,
        not thousands for the collector to walk. Consume it on the thread that started it."""
        with self.engine.connect() as conn:
            for chunk in in_chunks(list(job_ids)):
                for row in conn.execute(_SUMMARIES_OF, {"ids": chunk}).all():
                    job = job_from_values(row[:-1])
                    yield (job.id, job.created_at, row[-1]), job

    def kept_renderings(self, keys: Sequence[JobKey], form: str) -> dict[str, tuple[bytes, bool]]:
        """(rendering, queued) by job id of those of `keys` kept for exactly that key's version
        in `form`. Keys listed together (a run of a listing, newest first) are read by a scan of
        their range of created_at when it holds little else, and looked up one by one when it
        does (a sparse page: active jobs among a long history)."""
        found: dict[str, tuple[bytes, bool]] = {}
        scan = _driver_form(_RENDERINGS_IN, self.engine.dialect)
        with self.engine.connect() as conn:
            # The driver's cursor: 100,000 renderings read at a start cost no row objects.
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                for start in range(0, len(keys), IN_LIST_SIZE):
                    chunk = keys[start : start + IN_LIST_SIZE]
                    created = [key[1] for key in chunk]
                    most = 2 * len(chunk) + 16
                    cursor.execute(*scan(lo=min(created), hi=max(created), form=form, most=most))
                    rows: Sequence[Any] = cursor.fetchall()
                    if len(rows) >= most:  # the range holds more than this run: look each up
                        pairs = [(key[1], key[0]) for key in chunk]
                        rows = conn.execute(_RENDERINGS_OF, {"keys": pairs, "form": form}).all()
                    wanted = {key[0]: key[2] for key in chunk}
                    for job_id, version, queued, data in rows:
                        if wanted.get(job_id) == version:
                            found[job_id] = (data, bool(queued))
            finally:
                cursor.close()
        return found

    def keep_renderings(self, kept: Sequence[Kept], form: str) -> None:
        """Keep these renderings (in `form`) in one transaction, each replacing the job's
        rendering kept before."""
        if not kept:
            return
        rows = [
            {"created_at": key[1], "job_id": key[0], "version": key[2], "form": form,
             "queued": queued, "data": data}
            for key, data, queued in kept
        ]  # fmt: skip
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(JobRenderingRow)
        stmt = stmt.on_conflict_do_update(
            index_elements=["created_at", "job_id"],
            set_={c: stmt.excluded[c] for c in ("version", "form", "queued", "data")},
        )
        with self.engine.begin() as conn:
            conn.execute(stmt, rows)

    def job_owners(self, job_ids: Sequence[str]) -> dict[str, JobOwner]:
        """Phase, owner and owner's groups of the given jobs (unknown ids are left out): what
        a batch of decisions to act on jobs reads, three columns instead of a summary."""
        found: dict[str, JobOwner] = {}
        with self.engine.connect() as conn:
            for chunk in in_chunks(list(job_ids)):
                for job_id, phase, user, groups in conn.execute(_OWNERS_OF, {"ids": chunk}):
                    found[job_id] = JobOwner(Phase(phase), user, tuple(groups or ()))
        return found


@functools.lru_cache(maxsize=16)
def _driver_form(stmt: Any, dialect: Dialect) -> Callable[..., tuple[str, Any]]:
    """A statement compiled once for `dialect`: the SQL and the driver's parameters of a call
    (by name: values of its bind parameters)."""
    compiled = stmt.compile(dialect=dialect)
    order = compiled.positiontup if compiled.positional else None

    def call(**params: Any) -> tuple[str, Any]:
        values = compiled.construct_params(params)
        return compiled.string, values if order is None else tuple(values[n] for n in order)

    return call


def _page_stmt(query: JobQuery, columns: Sequence[Any], dialect: str = "sqlite") -> Any:
    """One page of a list query: filters, keyset position, newest first, one row extra."""
    limit = query.limit if query.limit > 0 else DEFAULT_LIMIT
    stmt = select(*columns)
    if query.reasons:
        stmt = stmt.where(_has_reason(query, dialect))
    if query.phases:
        stmt = stmt.where(JobRow.phase.in_(sorted(p.value for p in query.phases)))
    elif not query.include_terminal and not query.reasons:  # a reason: ended jobs have one too
        stmt = stmt.where(ACTIVE_PHASES_SQL)
    if query.user:
        stmt = stmt.where(JobRow.user == query.user)
    if query.array:
        stmt = stmt.where(JobRow.array_id != "", JobRow.array_id == query.array)
    for key, value in query.labels.items():
        stmt = stmt.where(_has_label(key, (value,)))
    for requirement in query.selector.requirements:
        has = _has_label(requirement.key, requirement.values)
        stmt = stmt.where(~has if requirement.op.negated else has)
    if query.page_token:
        created, last_id = _decode_token(query.page_token)
        # A row value: both databases seek the index to it (SQLite scanned the index from the
        # newest job on for the OR of the two comparisons, so page N cost N pages).
        stmt = stmt.where(tuple_(JobRow.created_at, JobRow.id) < tuple_(created, last_id))
    return stmt.order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit + 1)


def _has_reason(query: JobQuery, dialect: str) -> Any:
    """The job's reason or pending reason has one of the query's codes: as its row says, or,
    for a queued job the scheduler decided on, as the list use case found (`waiting`)."""
    codes = sorted(code.value for code in query.reasons)
    on_row = or_(JobRow.reason_code.in_(codes), JobRow.pending_reason_code.in_(codes))
    if query.waiting is None:
        return on_row
    queued = JobRow.phase == Phase.QUEUED.value
    return or_(
        and_(~queued, on_row),
        and_(queued, JobRow.id.in_(_listed(query.waiting, dialect))),
        and_(queued, on_row, JobRow.id.in_(_listed(query.undecided, dialect))),
    )


def _listed(job_ids: frozenset[str], dialect: str) -> Any:
    """A select of `job_ids` bound as one JSON parameter: a queue of 100,000 jobs waiting for
    capacity is one value, not 100,000 (SQLite allows 32,766; PostgreSQL 65,535)."""
    ids = json.dumps(sorted(job_ids))
    if dialect == "postgresql":
        rows = func.jsonb_array_elements_text(cast(ids, postgresql.JSONB))
    else:
        rows = func.json_each(ids)
    listed = rows.table_valued("value")
    return select(listed.c.value)


def _has_label(key: str, values: Sequence[str]) -> Any:
    """The job has label `key`, with one of `values` unless they are empty (a lookup of the
    label table's primary key per job)."""
    found = select(JobLabelRow.job_id).where(
        JobLabelRow.job_id == JobRow.id, JobLabelRow.key == key
    )
    if len(values) == 1:
        found = found.where(JobLabelRow.value == values[0])
    elif values:
        found = found.where(JobLabelRow.value.in_(values))
    return found.exists()


def _encode_token(created_at: float, job_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, job_id]).encode()).decode()


def _decode_token(token: str) -> tuple[float, str]:
    try:
        created, job_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not math.isfinite(float(created)) or not isinstance(job_id, str):
            raise ValueError(token)
        return float(created), job_id
    except (ValueError, TypeError):
        raise InvalidSpec("page_token is not one this server issued", field="page_token") from None
