"""Per-user limits, so one user cannot starve the rest: what each user may hold at once and how
fast they may call, and the decisions over them (pure: the time is always passed in).

Five caps, each per user: concurrent long-lived streams (a watch, a followed log, an event
stream, a dashboard feed), a request rate (a token bucket: `requests_per_second` refilled,
`burst` at most, as Slurm's per-user RPC rate limits), jobs waiting to run (non-terminal, not
yet RUNNING: Slurm's MaxSubmitJobs), the CS-2 systems their admitted jobs hold at once
(Slurm's MaxTRESPerUser: the scheduler's admission keeps a job that would go over it
queued, scheduler/user_caps.py), and per queue the jobs one user may have waiting in it.
Admins override them per user and per group in the limits file (services/limits_file.py
reads it); a user's cap is, field by field, their own override, else the most generous of
their groups', else the defaults. None is "unlimited".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

from appliance.domain.errors import LimitExceeded
from appliance.domain.phases import ACTIVE, Phase

# The phases a job counts as waiting in: submitted and not yet running.
WAITING = frozenset(ACTIVE - {Phase.RUNNING})


@dataclasses.dataclass(frozen=True)
class Caps:
    """One user's caps (None: unlimited). The defaults are for a 64-system cluster: a stream
    per system twice over (a launcher's watch and its followed log for as many jobs as could
    run at once), a rate well above csctl, the launchers' lease heartbeats and a dashboard,
    and four jobs waiting per system. Running systems are not capped by default (a user alone
    on the cluster may use all of it)."""

    streams: int | None = 128
    requests_per_second: float | None = 50.0
    burst: int = 200
    queued_jobs: int | None = 256
    running_systems: int | None = None


CAP_FIELDS = tuple(f.name for f in dataclasses.fields(Caps))


@dataclasses.dataclass(frozen=True)
class Override:
    """What an admin set for a user or a group; a field not in `fields` is not set."""

    values: Mapping[str, int | float | None]

    def has(self, name: str) -> bool:
        return name in self.values


@dataclasses.dataclass(frozen=True)
class LimitsPolicy:
    """The defaults, the overrides, and the per-queue caps (jobs one user may have waiting in
    that queue). `enabled` False turns every cap off."""

    defaults: Caps = Caps()
    users: Mapping[str, Override] = dataclasses.field(default_factory=dict)
    groups: Mapping[str, Override] = dataclasses.field(default_factory=dict)
    queues: Mapping[str, int] = dataclasses.field(default_factory=dict)
    enabled: bool = True

    def caps_of(self, user: str, groups: tuple[str, ...] = ()) -> Caps:
        """The caps of `user` in `groups`: own override, else the most generous group's,
        else the defaults; everything unlimited when limits are off."""
        if not self.enabled:
            return OFF
        own = self.users.get(user)
        theirs = [o for g in groups if (o := self.groups.get(g)) is not None]
        chosen: dict[str, int | float | None] = {}
        for name in CAP_FIELDS:
            if own is not None and own.has(name):
                chosen[name] = own.values[name]
            elif given := [o.values[name] for o in theirs if o.has(name)]:
                chosen[name] = _most_generous(given)
        return dataclasses.replace(self.defaults, **chosen)  # type: ignore[arg-type]

    @functools.cached_property
    def caps_running_systems(self) -> bool:
        """Whether any user may have a cap of running systems (else admission counts none)."""
        if not self.enabled:
            return False
        overrides = [*self.users.values(), *self.groups.values()]
        return self.defaults.running_systems is not None or any(
            o.values.get("running_systems") is not None for o in overrides
        )

    def queue_cap(self, queue: str) -> int | None:
        """The jobs one user may have waiting in `queue` (None: only the total applies)."""
        return self.queues.get(queue) if self.enabled else None


OFF = Caps(streams=None, requests_per_second=None, burst=1, queued_jobs=None)


def _most_generous(values: list[int | float | None]) -> int | float | None:
    if any(v is None for v in values):
        return None
    return max(v for v in values if v is not None)


class TokenBucket:
    """A token bucket: `burst` tokens at most, refilled at `rate` per second; a request takes
    one. Time is passed in (seconds on a monotonic clock)."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = now

    def level(self, now: float) -> float:
        """The tokens there are at `now` (refilled since the last look)."""
        elapsed = max(0.0, now - self._stamp)  # the tokens may be owed (below 0): reserve
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        self._stamp = max(self._stamp, now)
        return self._tokens

    def until_token(self, now: float) -> float:
        """The seconds until there is a token to take (0.0: there is one)."""
        return max(0.0, 1.0 - self.level(now)) / self.rate

    def take(self, now: float) -> float:
        """Take a token: 0.0 if there was one, else the seconds until there will be (nothing
        is taken then)."""
        wait = self.until_token(now)
        if wait == 0.0:
            self._tokens -= 1.0
        return wait

    def reserve(self, now: float, most: float) -> float | None:
        """Take a token, owing it if there is none: the seconds until it is there (0.0: at
        once), or None (nothing taken) when that would be more than `most` seconds away. So
        calls over the rate wait in line for their tokens, as API Priority and Fairness
        queues requests, instead of coming back at once."""
        wait = self.until_token(now)
        if wait > most:
            return None
        self._tokens -= 1.0
        return wait

    def retune(self, rate: float, burst: int) -> None:
        """New caps from the limits file: the tokens held stay, bounded by the new burst."""
        self.rate, self.burst = rate, burst
        self._tokens = min(self._tokens, float(burst))

    def full(self, now: float) -> bool:
        return self.level(now) >= self.burst


def retry_after_seconds(wait: float) -> int:
    """A wait as Retry-After says it: whole seconds, at least 1."""
    return max(1, math.ceil(wait))


def rate_refusal(user: str, caps: Caps, wait: float) -> LimitExceeded:
    return LimitExceeded(
        f"{user} is over the request rate limit ({caps.requests_per_second:g} requests per "
        f"second, bursts of {caps.burst}); retry in {retry_after_seconds(wait)} s",
        limit="requests_per_second",
        retry_after=wait,
    )


STREAM_RETRY_SECONDS = 5.0
SUBMIT_RETRY_SECONDS = 30.0


def check_streams(user: str, caps: Caps, open_now: int) -> None:
    """Raise LimitExceeded unless `user`, holding `open_now` streams, may open another."""
    if caps.streams is not None and open_now >= caps.streams:
        raise LimitExceeded(
            f"{user} has {open_now} streams open (watches, followed logs, event streams), "
            f"the limit of streams per user is {caps.streams}; close one (end a `-f`, a "
            "watch or a dashboard tab) and retry",
            limit="streams",
            retry_after=STREAM_RETRY_SECONDS,
        )


def check_queued(
    user: str,
    caps: Caps,
    waiting: Mapping[str, int],
    queue: str,
    queue_cap: int | None,
    adding: int = 1,
) -> None:
    """Raise LimitExceeded unless `user`, with `waiting` jobs by queue not yet running, may
    submit `adding` more (an array's tasks) to `queue` (whose per-user cap is `queue_cap`)."""
    total = sum(waiting.values())
    more = f" and this submit makes {adding} more (an array's tasks)" if adding > 1 else ""
    if caps.queued_jobs is not None and total + adding > caps.queued_jobs:
        raise LimitExceeded(
            f"{user} has {total} jobs waiting to run{more}, the limit of queued jobs per user is "
            f"{caps.queued_jobs}; wait for some to start or cancel some, then submit again",
            limit="queued_jobs",
            retry_after=SUBMIT_RETRY_SECONDS,
        )
    in_queue = waiting.get(queue, 0)
    if queue_cap is not None and in_queue + adding > queue_cap:
        raise LimitExceeded(
            f"{user} has {in_queue} jobs waiting in queue {queue}{more}, the limit of queued jobs "
            f"per user in that queue is {queue_cap}; wait for some to start or cancel some, "
            "then submit again",
            limit="queued_jobs_per_queue",
            retry_after=SUBMIT_RETRY_SECONDS,
        )


@dataclasses.dataclass(frozen=True)
class LimitsReport:
    """A user's caps and what they use of them now (`csctl get limits`)."""

    user: str
    enabled: bool
    caps: Caps
    streams_open: int
    tokens_left: float
    waiting: Mapping[str, int]
    queue_caps: Mapping[str, int]
    running_systems: int = 0  # the CS-2 systems the user's admitted jobs hold now
