"""What this coordinator is now: the only one, a standby, or the leader (and under which epoch).

The elector (loops/leadership.py) writes it; the store's fence, the reconciler and the doors
read it. The epoch a coordinator may act and write under is good only until its renew deadline
(`valid_until`, on the monotonic clock), so a leader that was paused past it holds no epoch the
moment it wakes, before any of its tasks runs: it neither launches nor writes.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from appliance.domain.leadership import standby_message


class Standing(enum.Enum):
    ONLY = "only"  # no election (SQLite, or election off): always acts, nothing fenced
    STANDBY = "standby"
    TAKING_OFFICE = "taking office"  # fence raised, adopting replicas: writes, serves nobody
    LEADING = "leading"
    STEPPED_DOWN = "stepped down"  # lost the lease; the process is on its way out


class Leadership:
    def __init__(
        self,
        identity: str = "",
        *,
        elected: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity = identity
        self.role = Standing.STANDBY if elected else Standing.ONLY
        self.clock = clock
        self.leader = ""  # the leader as last seen in the lease
        self.leader_epoch = 0
        self._epoch: int | None = None
        self._valid_until = 0.0

    @property
    def elected(self) -> bool:
        return self.role is not Standing.ONLY

    def epoch(self) -> int | None:
        """The epoch to act and write under now; None when not leading (or past the renew
        deadline). The store's fence calls this in every phase write."""
        if self.role not in (Standing.TAKING_OFFICE, Standing.LEADING):
            return None
        return self._epoch if self.clock() < self._valid_until else None

    def acting(self) -> bool:
        """Whether to start or stop replicas now."""
        return self.role is Standing.ONLY or self.epoch() is not None

    def problem(self) -> str | None:
        """None while this coordinator serves callers; else the one line they get."""
        if self.role is Standing.ONLY or (self.role is Standing.LEADING and self.acting()):
            return None
        if self.role is Standing.TAKING_OFFICE and self.acting():
            return "this coordinator was just elected and is adopting replicas; retry shortly"
        if self.role is Standing.STANDBY and self.leader == self.identity:
            return "this coordinator was just elected and is taking office; retry shortly"
        if self.role in (Standing.LEADING, Standing.STEPPED_DOWN):
            return (
                "this coordinator lost its leadership lease and is stepping down; retry "
                "through the appliance's Service address"
            )
        return standby_message(self.leader, self.leader_epoch)

    # ---- written by the elector and the composition root ------------------------------------

    def saw(self, leader: str, epoch: int) -> None:
        """The lease names `leader` (someone else, or this one)."""
        self.leader, self.leader_epoch = leader, epoch

    def renewed(self, epoch: int, valid_until: float) -> None:
        """This coordinator holds the lease under `epoch` until `valid_until` (monotonic)."""
        self._epoch, self._valid_until = epoch, valid_until
        self.saw(self.identity, epoch)

    def take_office(self) -> None:
        """The fence is raised to this coordinator's epoch: it may write (and adopt)."""
        self.role = Standing.TAKING_OFFICE

    def serve(self) -> None:
        """Replicas adopted, loops running: callers are served."""
        self.role = Standing.LEADING

    def step_down(self) -> None:
        self.role = Standing.STEPPED_DOWN
        self._epoch = None
