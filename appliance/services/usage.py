"""Usage accounting (`csctl get usage`, REST /api/v1/usage): per user, group, queue or array
(its tasks together) over a
time window, what jobs held and how they fared (domain/usage.py says what each number means;
store/usage.py computes them in the database).

Usage is cluster-wide accounting, like Slurm's sreport: every user may see it, for every user,
group and queue. It names users, groups and queues, never a job or what it runs.
"""

from __future__ import annotations

from appliance.domain.usage import UsageQuery, UsageRow, parse_when, usage_query
from appliance.services.context import Context


class UsageService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def report(
        self, since: float | str, until: float | str, by: str
    ) -> tuple[UsageQuery, list[UsageRow]]:
        """Usage between `since` and `until` (Unix times, or text parse_when reads: 30d, a
        date...; 0 or "": 30 days before until, and now) per `by` (user, group or queue; "":
        user): the window as checked, and one row per key with something in it, by key.
        InvalidSpec naming the field for a bad window or `by`."""
        now = self.ctx.clock()
        start = parse_when(since, now, "since") if isinstance(since, str) and since else since
        end = parse_when(until, now, "until") if isinstance(until, str) and until else until
        query = usage_query(start or 0.0, end or 0.0, by, now=now)
        return query, await self.ctx.read(self.ctx.store.usage, query, now)
