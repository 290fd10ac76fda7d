"""Replica logs: read from the backend, optionally followed until the job ends."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

from appliance.backends.base import Backend
from appliance.domain.auth import Principal, check_may_act_on
from appliance.domain.errors import NotFound, job_not_found
from appliance.services.context import Context

FOLLOW_POLL_SECONDS = 0.25


class LogService:
    def __init__(self, ctx: Context, backend: Backend) -> None:
        self.ctx = ctx
        self.backend = backend

    async def check(
        self, job_id: str, replica: str = "", *, by: Principal | None = None
    ) -> list[str]:
        """Raise what `read` would before its first line: the job is unknown, the caller may
        not read its logs, it has no such replica. Returns its replicas' names."""
        if by is not None:
            found = await self.ctx.read(self.ctx.store.job_summaries, [job_id])
            if not found:
                raise job_not_found(job_id)
            check_may_act_on(by, found[0].user, found[0].groups, "read the logs of")
        names = await self._replica_names(job_id)
        if replica and replica not in names:
            known = ", ".join(names) or "none yet"
            raise NotFound(
                f"job {job_id} has no replica {replica!r} (replicas: {known})", field="replica"
            )
        return names

    async def read(
        self,
        job_id: str,
        replica: str = "",
        follow: bool = False,
        *,
        by: Principal | None = None,
        tail: int | None = None,
    ) -> AsyncIterator[tuple[str, list[str]]]:
        """(replica, lines) chunks of one replica's log, or of every replica's in turn.

        With `follow`, keeps reading new lines (like `tail -f`) until the job is terminal, then
        returns what is left. `tail`: of what is written so far, only each replica's last
        `tail` lines (then, with `follow`, every new line).
        """
        names = await self.check(job_id, replica, by=by)
        offsets: dict[str, int] = {}
        while True:
            phase = await self.ctx.db(self.ctx.store.phase_of, job_id)
            if not replica:
                names = await self._replica_names(job_id)  # a queued job has none yet
            for name in [replica] if replica else names:
                last: collections.deque[str] | None = None
                if tail is not None and name not in offsets:
                    last = collections.deque(maxlen=tail)  # the first read of it: its tail
                while True:
                    offset = offsets.get(name, 0)
                    text, offsets[name] = await self.backend.read_log(job_id, name, offset)
                    if not text:
                        break
                    if last is None:
                        yield name, text.splitlines()
                    else:
                        last.extend(text.splitlines())
                if last:
                    yield name, list(last)
            if not follow or phase is None or phase.terminal:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)  # log files offer nothing to await

    async def _replica_names(self, job_id: str) -> list[str]:
        replicas = await self.ctx.db(self.ctx.store.replicas, job_id)
        if not replicas:
            await self.ctx.db(self.ctx.store.get_job, job_id, with_replicas=False)  # NotFound
        return [r.name for r in replicas]
