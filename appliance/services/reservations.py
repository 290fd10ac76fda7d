"""Reservations (#37; what one is and what is refused: domain/reservations.py): admins create
and delete them, anyone lists them (nothing of one is secret: its window, nodes and whom it
is for are what a user needs to know why a job waits). A change wakes the scheduler, which
keeps them from its next pass (scheduler/reservations.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import NotFound, PermissionDenied
from appliance.domain.listing import MAX_LIMIT, JobQuery
from appliance.domain.phases import HOLDS_RESOURCES
from appliance.domain.reservations import (
    Reservation,
    book,
    check_name,
    check_request,
    holding,
)
from appliance.services.context import Context
from appliance.services.queues import find_queue


class ReservationService:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def create(self, fields: Mapping[str, Any], by: Principal | None) -> Reservation:
        """Book a reservation from a request's plain fields (check_request says which)."""
        _check_admin(by, "create reservations")
        ctx = self._ctx
        now = ctx.clock()
        request = check_request(fields, now)
        if request.queue:  # a reservation for a queue no job can be in is a mistake
            find_queue(await ctx.read(ctx.store.queue_specs), request.queue)
        pool = await ctx.db(ctx.store.pool)
        busy = await self._busy_until(now) if request.counts or request.maint else None
        creator = by.user if by is not None else ANONYMOUS_USER
        booked = await ctx.db(
            ctx.store.book_reservation,
            lambda existing: book(request, pool, existing, creator, now, busy),
            now,
        )
        ctx.bus.wake_scheduler()
        return booked

    async def _busy_until(self, now: float) -> dict[str, float]:
        """Each CS-2 system a job holds -> when that job ends by its time limit (inf: it has
        none): a count books those free before the window last, maintenance none of those
        busy in it."""
        ctx = self._ctx
        holding_query = JobQuery(phases=frozenset(HOLDS_RESOURCES), limit=MAX_LIMIT)
        keys, _ = await ctx.read(ctx.store.list_job_keys, holding_query)
        busy: dict[str, float] = {}
        for job in await ctx.read(ctx.store.job_summaries, [key[0] for key in keys]):
            limit = job.spec.time_limit_seconds
            began = job.started_at or now  # not started yet: from now at the earliest
            busy.update(dict.fromkeys(job.systems, math.inf if limit is None else began + limit))
        return busy

    async def list(self) -> list[Reservation]:
        """The reservations not ended, by start (ended ones are dropped)."""
        now = self._ctx.clock()
        return [r for r in await self._ctx.read(self._ctx.store.reservations) if r.end > now]

    async def holding(self) -> dict[str, str]:
        """Each node's reservation now or next, by name (`csctl get systems`)."""
        return {node: r.name for node, r in holding(await self.list(), self.now()).items()}

    def now(self) -> float:
        return self._ctx.clock()

    async def delete(self, name: str, by: Principal | None) -> None:
        _check_admin(by, "delete reservations")
        name = check_name(name)
        if not await self._ctx.db(self._ctx.store.delete_reservation, name):
            raise NotFound(f"no reservation named {name}", field="name")
        self._ctx.bus.wake_scheduler()


def _check_admin(by: Principal | None, what: str) -> None:
    if by is not None and not by.admin:
        raise PermissionDenied(f"only admins may {what}; {by.user} is not one", field="name")
