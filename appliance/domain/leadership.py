"""Leader election between coordinators: the lease record, the lock it lives behind, and the
timing that keeps two leaders from acting at once.

One algorithm (client-go's leaderelection) over one small protocol, `LeaseLock`, with two
implementations: a Kubernetes Lease (backends/kubernetes/lease.py) and a row in PostgreSQL
(store/leadership.py). The record carries no time: a candidate measures how long the record
stayed unchanged on its own monotonic clock, so clocks of different hosts never need to agree.

What a lease guarantees:
- A holder renews every `retry_period`; a renewal counts from the moment it was *sent*.
- A candidate takes over only after seeing the same record, unchanged, for `duration`.
- A holder stops acting `renew_deadline` after its last successful renewal, and
  renew_deadline < duration, so it has stopped before any candidate may start.
- Every acquisition raises `epoch` by one. The store refuses a write under an epoch that is
  not the newest (store/leadership.py): a holder paused past its lease cannot write on waking.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from appliance.domain.errors import Unavailable


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    """How long a lease lasts, when its holder gives up renewing, and how often it tries.

    The sum of `duration` and `retry_period` bounds how long the coordinators are without a
    leader after one dies without releasing its lease.
    """

    duration: float = 8.0
    renew_deadline: float = 5.0
    retry_period: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ValueError(
                "lease timing must satisfy 0 < retry period < renew deadline < duration, got "
                f"{self.retry_period} < {self.renew_deadline} < {self.duration}"
            )


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The lease as stored. `holder` is empty once released; `version` is the lock's own
    optimistic-concurrency token (a resourceVersion, a row counter), opaque to the elector."""

    holder: str
    epoch: int
    duration: float
    version: str = ""

    @property
    def released(self) -> bool:
        return not self.holder


class LeaseLock(Protocol):
    """Where the lease lives: read it, create it, and replace it only if unchanged."""

    @property
    def description(self) -> str:
        """What and where the lease is, for logs ("Lease appliance/appliance-leader")."""

    async def read(self) -> LeaseRecord | None:
        """The current record, or None if there is none yet."""

    async def create(self, record: LeaseRecord) -> LeaseRecord | None:
        """Create the record; None if one exists already (someone else created it first)."""

    async def update(self, record: LeaseRecord, version: str) -> LeaseRecord | None:
        """Replace the record if its version is still `version`; None if it changed."""


class NotLeader(Unavailable):
    """This coordinator is a standby (or stopped leading): it neither acts nor writes."""


def standby_message(leader: str, epoch: int) -> str:
    """The one line a caller that reached a standby gets."""
    if not leader:
        return "this coordinator is a standby and no leader is elected yet; retry in a few seconds"
    return (
        f"this coordinator is a standby; the leader is {leader} (epoch {epoch}): "
        "retry through the appliance's Service address, or at the leader"
    )
