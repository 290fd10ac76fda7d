"""Client leases: a job submitted without `detach` lives only as long as its client.

The client sends `lease_seconds` with the submit; the coordinator cancels the job ("client lease
expired ...") when no HeartbeatLease arrives for that long. `LeaseKeeper` is the one daemon
thread per client that renews the lease of every held job each `interval` seconds. A job is
dropped from the keeper when the server says it is terminal (`keep_running` false) or unknown;
`stop()` (called by `ApplianceClient.close`) ends all heartbeats, so the held jobs lapse. A
failed heartbeat (coordinator restarting, network blip) is retried at the next interval: with
the defaults (60 s lease, 10 s interval) five heartbeats in a row may fail before a job lapses.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from appliance.domain.errors import ApplianceError, InvalidSpec, NotFound

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_HEARTBEAT_INTERVAL = 10.0

Heartbeat = Callable[[str], bool]
"""Renews one job's lease and returns whether to keep heartbeating (False once terminal)."""


def lease_holder() -> str:
    """Who holds a lease: `host:pid` of this process (shown in the job's status)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_lease_timing(lease_seconds: float, heartbeat_interval: float) -> None:
    """Raise InvalidSpec unless a heartbeat every `heartbeat_interval` s can keep the lease."""
    if lease_seconds < 0:
        raise InvalidSpec(
            f"lease_seconds must be >= 0 (0 = detached), got {lease_seconds}",
            field="lease_seconds",
        )
    if heartbeat_interval <= 0 or (lease_seconds and heartbeat_interval >= lease_seconds):
        raise InvalidSpec(
            f"heartbeat_interval must be positive and shorter than lease_seconds "
            f"({lease_seconds} s), got {heartbeat_interval}",
            field="heartbeat_interval",
        )


class LeaseKeeper:
    """Heartbeats the leases of the held jobs from one daemon thread, started on first use."""

    def __init__(self, heartbeat: Heartbeat, interval: float) -> None:
        self._heartbeat = heartbeat
        self._interval = interval
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> frozenset[str]:
        """The ids of the jobs whose leases are being renewed."""
        with self._lock:
            return frozenset(self._held)

    def hold(self, job_id: str) -> None:
        """Renew `job_id`'s lease from now on (until it is terminal or the keeper stops)."""
        with self._lock:
            if self._stopped.is_set():
                raise RuntimeError("the client is closed; its leases are no longer renewed")
            self._held.add(job_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="appliance-lease-heartbeat", daemon=True
                )
                self._thread.start()

    def release(self, job_id: str) -> None:
        """Stop renewing `job_id`'s lease: the coordinator cancels it once the lease lapses."""
        with self._lock:
            self._held.discard(job_id)

    def stop(self, timeout: float | None = None) -> None:
        """Stop every heartbeat and wait for the thread (at most `timeout` seconds)."""
        with self._lock:
            self._stopped.set()
            self._held.clear()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            for job_id in sorted(self.held):
                if self._stopped.is_set():
                    return
                if not self._beat(job_id):
                    self.release(job_id)

    def _beat(self, job_id: str) -> bool:
        try:
            return self._heartbeat(job_id)
        except NotFound:
            return False
        except ApplianceError as exc:  # retried at the next interval
            log.warning("lease heartbeat for job %s failed: %s", job_id, exc.message)
            return True
