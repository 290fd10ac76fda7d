"""Leadership in the store: the election lease when there is no Kubernetes cluster, and
taking office (raising the fence, store/fence.py, to the new leader's epoch)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sqlalchemy import Engine, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from appliance.domain.leadership import LeaseRecord
from appliance.store.base import StoreBase
from appliance.store.fence import FENCE
from appliance.store.tables import CoordinatorLeaseRow, LeaderFenceRow

log = logging.getLogger(__name__)
_END_SESSIONS = text(
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name = :name "
    "AND pid <> pg_backend_pid()"
)


class LeadershipStore(StoreBase):
    """JobStore's part for the fence."""

    def take_office(self, epoch: int, holder: str, now: float) -> bool:
        """Raise the fence to `epoch`; False if it is there or beyond already (a newer leader
        took office: this one must not act).

        On PostgreSQL the previous officeholder's sessions are ended first. One paused (SIGSTOP,
        a frozen VM) between a write and its commit still holds that write's locks: the
        fence's row (FOR SHARE) would keep this update waiting, a job's row every write to that
        job, for as long as the pause lasts. Ended, its open transactions roll back, as the
        fence would have refused them on waking; its pool connects again if it ever wakes."""
        sessions = ""
        if self.engine.dialect.name == "postgresql":
            sessions = self._end_sessions_of_the_last_leader(epoch)
        with self._sessions.begin() as s:
            result = s.execute(
                update(LeaderFenceRow)
                .where(LeaderFenceRow.name == FENCE, LeaderFenceRow.epoch < epoch)
                .values(epoch=epoch, holder=holder, since=now, sessions=sessions)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def _end_sessions_of_the_last_leader(self, epoch: int) -> str:
        """End the sessions named as the fence's holder's (not ours), unless a leader newer
        than `epoch` holds it (this one will not take office); our sessions' name."""
        with self.engine.connect() as conn:
            ours = conn.execute(text("SELECT current_setting('application_name')")).scalar_one()
            fence = conn.execute(
                select(LeaderFenceRow.epoch, LeaderFenceRow.sessions).where(
                    LeaderFenceRow.name == FENCE
                )
            ).first()
            last = fence.sessions if fence is not None and fence.epoch < epoch else ""
            if last and last != ours:
                try:
                    ended = conn.execute(_END_SESSIONS, {"name": last}).scalar_one()
                except DBAPIError as exc:  # e.g. another role's, without pg_signal_backend
                    log.warning(
                        "cannot end the last leader's database sessions (%s): a paused "
                        "leader's open transactions hold their locks until it wakes",
                        str(exc.orig).strip().splitlines()[0],
                    )
                    conn.rollback()
                    ended = 0
                if ended:
                    log.warning(
                        "ended %d database session(s) of the last leader (%s), still open: "
                        "what they had not committed rolled back",
                        ended,
                        last,
                    )
            conn.commit()
        return str(ours)

    def leader_in_office(self) -> tuple[str, int]:
        """Who took office last, and under which epoch ('' and 0 before anyone did)."""
        with self._sessions() as s:
            row = s.execute(
                select(LeaderFenceRow.holder, LeaderFenceRow.epoch).where(
                    LeaderFenceRow.name == FENCE
                )
            ).first()
        return (row.holder, row.epoch) if row is not None else ("", 0)


class SqlLeaseLock:
    """The election lease as a row of `coordinator_leases` (a LeaseLock), for coordinators
    sharing a PostgreSQL database without a Kubernetes cluster. Each call runs on a thread of
    its own, not on the store's threads, so a busy store does not delay a renewal."""

    def __init__(self, engine: Engine, name: str, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.name = name
        self.clock = clock

    @property
    def description(self) -> str:
        return f"lease {self.name!r} in the database's coordinator_leases table"

    async def read(self) -> LeaseRecord | None:
        return await asyncio.to_thread(self._read)

    async def create(self, record: LeaseRecord) -> LeaseRecord | None:
        return await asyncio.to_thread(self._create, record)

    async def update(self, record: LeaseRecord, version: str) -> LeaseRecord | None:
        return await asyncio.to_thread(self._update, record, version)

    def _read(self) -> LeaseRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(CoordinatorLeaseRow).where(CoordinatorLeaseRow.name == self.name)
            ).first()
        if row is None:
            return None
        return LeaseRecord(row.holder, row.epoch, row.duration_seconds, str(row.version))

    def _create(self, record: LeaseRecord) -> LeaseRecord | None:
        values = {
            "name": self.name, "holder": record.holder, "epoch": record.epoch,
            "duration_seconds": record.duration, "version": 1, "renewed_at": self.clock(),
        }  # fmt: skip
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(CoordinatorLeaseRow).values(values))
        except IntegrityError:
            return None
        return LeaseRecord(record.holder, record.epoch, record.duration, "1")

    def _update(self, record: LeaseRecord, version: str) -> LeaseRecord | None:
        if not version.isdigit():
            return None
        with self.engine.begin() as conn:
            written = conn.execute(
                update(CoordinatorLeaseRow)
                .where(
                    CoordinatorLeaseRow.name == self.name,
                    CoordinatorLeaseRow.version == int(version),
                )
                .values(
                    holder=record.holder,
                    epoch=record.epoch,
                    duration_seconds=record.duration,
                    version=CoordinatorLeaseRow.version + 1,
                    renewed_at=self.clock(),
                )
                .returning(CoordinatorLeaseRow.version)
            ).scalar_one_or_none()
        if written is None:
            return None
        return LeaseRecord(record.holder, record.epoch, record.duration, str(written))
