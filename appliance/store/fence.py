"""The fence: only the newest leader moves phases.

A leader takes office by raising `leader_fence.epoch` to its lease's epoch (never lowered;
store/leadership.py). Every phase write, and every request to stop a job's replicas, checks in
its own transaction that the epoch its coordinator holds *now* is the fence's (`Fence.check`,
with FOR SHARE on PostgreSQL, so a new leader's take_office waits for writes under the old epoch
to commit, and none commits after it). A coordinator that is not leading, or whose renew
deadline passed (it was paused), holds no epoch and writes nothing: NotLeader, and the
transaction rolls back.

With one coordinator (SQLite, or election off) the fence has no `held` and checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, select

from appliance.domain.leadership import NotLeader
from appliance.store.tables import LeaderFenceRow

FENCE = "coordinator"
_NEWEST = select(LeaderFenceRow.epoch).where(LeaderFenceRow.name == FENCE)


class Fence:
    """What a phase write checks. `held` says the epoch this coordinator may write under now
    (None: none); no `held` at all means one coordinator, nothing to fence."""

    def __init__(self, held: Callable[[], int | None] | None = None) -> None:
        self.held = held

    def check(self, conn: Connection) -> None:
        """Raise NotLeader unless this coordinator holds the newest epoch (in `conn`'s
        transaction, which the write then commits or rolls back)."""
        if self.held is None:
            return
        epoch = self.held()
        if epoch is None:
            raise NotLeader("this coordinator is not the leader: it writes no phase")
        stmt = _NEWEST if conn.dialect.name == "sqlite" else _NEWEST.with_for_update(read=True)
        newest = conn.execute(stmt).scalar_one_or_none()
        if newest != epoch:
            raise NotLeader(
                f"epoch {epoch} is over (the newest leader took office under epoch {newest}): "
                "this coordinator stepped down and writes no phase"
            )
