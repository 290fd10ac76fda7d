"""Client leases against the real coordinator: a closed client's job is cancelled."""

from __future__ import annotations

import os
import time
from pathlib import Path

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, wait_until

LEASE = 1.0


def test_a_closed_clients_job_is_cancelled_and_a_detached_one_keeps_running(
    coordinator: RunningCoordinator, observer: ApplianceClient, params_file: Path
) -> None:
    client = ApplianceClient(coordinator.address, lease_seconds=LEASE, heartbeat_interval=0.2)
    leased = client.submit(params=params_file, num_csx=1, num_steps=1_000_000)
    detached = client.submit(params=params_file, num_csx=1, num_steps=1_000_000, detach=True)
    try:
        jobs = (leased.id, detached.id)
        wait_until(
            lambda: all(observer.get_job(j).phase is Phase.RUNNING for j in jobs), 60, "running"
        )
        lease = observer.get_job(leased.id).lease
        assert lease is not None and lease.holder.endswith(f":{os.getpid()}")
        assert observer.get_job(detached.id).lease is None

        # Heartbeats keep the job alive well past its lease.
        first_expiry = lease.expires_at
        wait_until(lambda: _expiry(observer, leased.id) > first_expiry + 3 * LEASE, 15, "renewals")
        assert observer.get_job(leased.id).phase is Phase.RUNNING

        client.close()
        closed_at = time.monotonic()
        wait_until(
            lambda: observer.get_job(leased.id).phase is Phase.CANCELLED, LEASE + 5, "lapse"
        )
        assert time.monotonic() - closed_at < LEASE + 5
        reason = observer.get_job(leased.id).reason
        assert reason.startswith("client lease expired"), reason

        step = observer.get_job(detached.id).progress.step
        wait_until(
            lambda: observer.get_job(detached.id).progress.step > step, 15, "detached progress"
        )
        assert observer.get_job(detached.id).phase is Phase.RUNNING
    finally:
        client.close()
        observer.cancel_job(leased.id)
        observer.cancel_job(detached.id)


def test_a_finished_job_is_no_longer_heartbeated(
    coordinator: RunningCoordinator, params_file: Path
) -> None:
    with ApplianceClient(coordinator.address, lease_seconds=LEASE, heartbeat_interval=0.2) as c:
        job = c.submit(params=params_file, num_csx=1, num_steps=5)
        assert c.held_jobs == {job.id}
        assert job.wait(timeout=60).phase is Phase.SUCCEEDED
        wait_until(lambda: not c.held_jobs, 10, "the lease keeper to drop the job")


def _expiry(client: ApplianceClient, job_id: str) -> float:
    lease = client.get_job(job_id).lease
    return lease.expires_at if lease else 0.0
