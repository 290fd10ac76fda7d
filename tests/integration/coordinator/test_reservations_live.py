"""Reservations end to end on a live coordinator with real local replicas, driven by csctl and
the client as users run them (#37): a maintenance window on three systems keeps a job whose
time limit would run into it waiting (reason Reservation) while a short one runs before it;
`csctl get systems` shows it; an overlapping booking is refused in one line naming the field,
nothing stored; once deleted, the waiting job runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import csctl, run_csctl
from tests.model_specs import FC


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data") as running:
        yield running


def test_a_maintenance_window_keeps_long_jobs_off_and_lets_short_ones_run(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    made = csctl(
        address, "reservation", "create", "fans", "--maint", "--systems", "cs2-01,cs2-02,cs2-03",
        "--start", "now+60", "--duration", "1:00:00",
    )  # fmt: skip
    assert made.startswith("reservation/fans created: cs2-01,cs2-02,cs2-03 from ")
    systems = {
        line.split()[0]: line.split() for line in csctl(address, "get", "systems").splitlines()
    }
    assert "RESERVATION" in systems["NAME"] and "fans" in systems["cs2-01"]
    assert "fans" not in systems["cs2-04"]
    refused = run_csctl(
        address, "reservation", "create", "team", "--systems", "cs2-03", "--users", "alice",
        "--start", "now+90", "--duration", "10",
    )  # fmt: skip
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "overlaps the maintenance reservation fans" in refused.stderr
    with ApplianceClient(address, detach=True) as client:
        long = client.submit(params=FC, num_csx=2, num_steps=5, time_limit="2:00:00")
        short = client.submit(params=FC, num_csx=1, num_steps=5, time_limit="10")
        assert short.wait(timeout=120).phase is Phase.SUCCEEDED
        assert short.status.systems[0] in ("cs2-01", "cs2-02", "cs2-03")
        wait_until(lambda: long.status.pending_reason_code == "Reservation", 30, "the reason")
        assert "Reserved for maintenance (fans)" in long.status.pending_reason
        assert [r.name for r in client.reservations()] == ["fans"]
        assert csctl(address, "reservation", "delete", "fans") == "reservation/fans deleted\n"
        assert long.wait(timeout=120).phase is Phase.SUCCEEDED
        assert client.reservations() == []
