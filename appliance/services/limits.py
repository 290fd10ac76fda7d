"""Per-user limits as the doors and the submit use case apply them: each user's token bucket,
their open streams, their jobs waiting to run (domain/limits.py decides; this keeps the counts).

The doors call `admit_call` for every call (gRPC, REST), `open_stream` before a long-lived
stream starts (the slot is given back when it ends), and JobService.submit calls
`submitting`. Every refusal is a LimitExceeded counted in the metrics by limit and door.
Everything here runs on the event loop: no lock is needed.

With authentication off a caller is the user it claims: the limits then keep honest users
from starving each other, not a user who lies about their name.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from appliance.domain.auth import Principal, limited_as
from appliance.domain.errors import LimitExceeded, PermissionDenied
from appliance.domain.limits import (
    Caps,
    LimitsPolicy,
    LimitsReport,
    TokenBucket,
    check_queued,
    check_streams,
    rate_refusal,
)
from appliance.domain.spec import validate_user
from appliance.services.limits_file import LimitsFile
from appliance.services.metrics import Metrics

# A call over the rate waits for its token this long at most (its place in line) ...
MAX_WAIT_SECONDS = 1.0
# ... and one that would wait longer is refused after this long.
HOLD_SECONDS = 1.0
# The users whose buckets are kept; past it, full buckets (idle users) are dropped first.
MAX_TRACKED_USERS = 10_000
CountWaiting = Callable[[str], Awaitable[Mapping[str, int]]]
CountHeld = Callable[[str], Awaitable[int]]


class StreamSlot:
    """One open stream of a user; `release` (idempotent) gives it back."""

    def __init__(self, limits: Limits, user: str) -> None:
        self._limits = limits
        self.user = user
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limits._stream_ended(self.user)


class Limits:
    def __init__(
        self,
        source: LimitsFile,
        count_waiting: CountWaiting,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        count_held: CountHeld | None = None,
    ) -> None:
        """`count_waiting(user)`: the user's jobs not yet running, by queue (the store);
        `clock` and `sleep`: the time the buckets fill in, and how a call waits on it;
        `count_held(user)`: the systems the user's admitted jobs hold (the store; the cap
        itself is kept by the scheduler's admission, scheduler/user_caps.py)."""
        self._count_held = count_held
        self._source = source
        self._count_waiting = count_waiting
        self._metrics = metrics
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, TokenBucket] = {}
        self._streams: collections.Counter[str] = collections.Counter()
        self._submitting: collections.Counter[str] = collections.Counter()

    @property
    def policy(self) -> LimitsPolicy:
        return self._source.policy()

    def caps(self, user: str, groups: tuple[str, ...] = ()) -> Caps:
        return self.policy.caps_of(user, groups)

    async def admit_call(self, user: str, groups: tuple[str, ...], door: str) -> None:
        """Take a token of `user`'s bucket for one call, waiting for it when it comes within
        MAX_WAIT_SECONDS; else LimitExceeded, after HOLD_SECONDS: a caller that does not
        honour Retry-After (back to back, many at once) gets its answers no faster than that,
        so its refusals cannot take the coordinator's time from other users."""
        caps = self.caps(user, groups)
        if caps.requests_per_second is None:
            return
        now = self._clock()
        bucket = self._bucket(user, caps, now)
        wait = bucket.reserve(now, MAX_WAIT_SECONDS)
        if wait is None:
            self._refused("requests_per_second", door)
            await self._sleep(HOLD_SECONDS)
            raise rate_refusal(
                user, caps, max(bucket.until_token(self._clock()), 1.0 / bucket.rate)
            )
        if wait > 0.0:
            await self._sleep(wait)

    def open_stream(self, user: str, groups: tuple[str, ...], door: str) -> StreamSlot:
        """A slot for one long-lived stream of `user`; LimitExceeded when they hold their
        cap. Release it when the stream ends."""
        try:
            check_streams(user, self.caps(user, groups), self._streams[user])
        except LimitExceeded:
            self._refused("streams", door)
            raise
        self._streams[user] += 1
        if self._metrics is not None:
            self._metrics.streams_open.inc()
        return StreamSlot(self, user)

    def _stream_ended(self, user: str) -> None:
        self._streams[user] -= 1
        if self._streams[user] <= 0:
            del self._streams[user]
        if self._metrics is not None:
            self._metrics.streams_open.dec()

    def streams_open(self, user: str) -> int:
        return self._streams[user]

    @contextlib.asynccontextmanager
    async def submitting(
        self,
        user: str,
        groups: tuple[str, ...],
        queue: str,
        door: str,
        count: int = 1,
        queue_defined: int | None = None,
    ) -> AsyncIterator[None]:
        """Around one submit of `count` jobs (an array's tasks): refuse it whole
        (LimitExceeded) when `user` would pass their cap of jobs waiting, in all or in
        `queue` (the limits file's cap for the queue, or the queue's own
        max_queued_jobs_per_user, `queue_defined`: the smaller). Submits under way count as
        waiting in `queue`, so two at once cannot both take the last place."""
        policy = self.policy
        caps, queue_cap = policy.caps_of(user, groups), policy.queue_cap(queue)
        if queue_defined is not None:
            queue_cap = queue_defined if queue_cap is None else min(queue_cap, queue_defined)
        if caps.queued_jobs is None and queue_cap is None:
            yield
            return
        under_way = self._submitting[user]
        self._submitting[user] += count
        try:
            waiting = dict(await self._count_waiting(user))
            waiting[queue] = waiting.get(queue, 0) + under_way
            try:
                check_queued(user, caps, waiting, queue, queue_cap, count)
            except LimitExceeded as exc:
                self._refused(exc.limit, door)
                raise
            yield
        finally:
            self._submitting[user] -= count
            if self._submitting[user] <= 0:
                del self._submitting[user]

    async def report_for(
        self, by: Principal | None, claimed: str | None, user: str = ""
    ) -> LimitsReport:
        """The limits of the caller (`by`, else the user it claims), or of `user`: another
        user's are for admins (that user's caps are then without their groups' overrides,
        which only their token says)."""
        own, groups = limited_as(by, claimed)
        if not user or user == own:
            return await self.report(own, groups)
        validate_user(user)
        if by is not None and not by.admin:
            raise PermissionDenied(
                f"{by.user} may see only their own limits; another user's are for admins",
                field="user",
            )
        return await self.report(user)

    async def report(self, user: str, groups: tuple[str, ...] = ()) -> LimitsReport:
        """`user`'s caps and what they use of them now."""
        policy = self.policy
        caps = policy.caps_of(user, groups)
        now = self._clock()
        bucket = self._buckets.get(user)
        tokens = float(caps.burst) if bucket is None else bucket.level(now)
        waiting = dict(await self._count_waiting(user))
        held = await self._count_held(user) if self._count_held is not None else 0
        return LimitsReport(
            user=user,
            enabled=policy.enabled,
            caps=caps,
            streams_open=self._streams[user],
            tokens_left=tokens,
            waiting=waiting,
            queue_caps=dict(policy.queues) if policy.enabled else {},
            running_systems=held,
        )

    def _bucket(self, user: str, caps: Caps, now: float) -> TokenBucket:
        assert caps.requests_per_second is not None
        bucket = self._buckets.get(user)
        if bucket is None:
            if len(self._buckets) >= MAX_TRACKED_USERS:
                self._forget_idle(now)
            bucket = self._buckets[user] = TokenBucket(caps.requests_per_second, caps.burst, now)
        elif (bucket.rate, bucket.burst) != (caps.requests_per_second, caps.burst):
            bucket.retune(caps.requests_per_second, caps.burst)
        return bucket

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that are full (their users called in no while): a new bucket is
        full, so nothing is given away. If none is, drop the oldest half."""
        idle = [user for user, b in self._buckets.items() if b.full(now)]
        if not idle:
            idle = list(self._buckets)[: len(self._buckets) // 2]
        for user in idle:
            del self._buckets[user]

    def _refused(self, limit: str, door: str) -> None:
        if self._metrics is not None:
            self._metrics.limit_refused(limit, door)
