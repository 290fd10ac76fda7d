"""`csctl get jobs --reason` and the REASON column of -o wide, over gRPC on a live
coordinator whose systems are in maintenance (jobs wait for capacity)."""

from __future__ import annotations

from pathlib import Path

from appliance.client import ApplianceClient
from tests.integration.client.conftest import Csctl, hold_queue
from tests.integration.coordinator.harness import RunningCoordinator, wait_until


def test_get_jobs_filters_on_reason_codes_and_wide_shows_the_code(
    coordinator: RunningCoordinator, observer: ApplianceClient, csctl: Csctl, params_file: Path
) -> None:
    hold_queue(coordinator)
    first, second, third = (
        observer.submit(params=params_file, num_csx=1, num_steps=5).id for _ in range(3)
    )
    assert observer.cancel_job(third).job.reason_code == "CancelledByUser"
    wait_until(
        lambda: [j.id for j in observer.list_jobs(reasons=["capacity"])] == [first],
        30,
        "the scheduler to say the first job waits for capacity",
    )
    [behind] = observer.list_jobs(reasons=["BehindHigherPriority"])
    assert (behind.id, behind.pending_reason_code) == (second, "BehindHigherPriority")

    wide = csctl(
        "get", "jobs", "--reason", "capacity", "--reason", "cancelledbyuser", "-o", "wide"
    )
    assert wide.exit_code == 0, wide.output
    header, *rows = wide.stdout.splitlines()
    assert "REASON" in header.split()
    by_id = {row.split()[0]: row.split() for row in rows}
    assert set(by_id) == {first, third}
    assert "Capacity" in by_id[first] and "CancelledByUser" in by_id[third]

    names = csctl("get", "jobs", "--reason", "BEHIND_HIGHER_PRIORITY,Quota", "-o", "name")
    assert (names.exit_code, names.stdout) == (0, f"{second}\n")
    none = csctl("get", "jobs", "--reason", "ReplicaFailed")
    assert (none.exit_code, none.stdout) == (0, "No jobs found.\n")

    refused = csctl("get", "jobs", "--reason", "Sleepy")
    assert refused.exit_code == 2
    [line] = [line for line in refused.stderr.splitlines() if "--reason" in line]
    assert "unknown reason code 'Sleepy'; valid codes: Scheduler, Capacity," in line

    empty = csctl("get", "jobs", "--reason", "")
    assert empty.exit_code == 2
    [line] = [line for line in empty.stderr.splitlines() if "--reason" in line]
    assert "an empty reason code" in line
