"""GET /api/v1/jobs?reason=: jobs filtered on the code of why they wait (read fresh from the
scheduler's last pass) or why they ended, on a live coordinator whose systems are parked."""

from __future__ import annotations

from typing import Any

from tests.integration.coordinator.harness import wait_until
from tests.integration.rest.conftest import Rest


def _listed(rest: Rest, *reasons: str) -> list[dict[str, Any]]:
    response = rest.http.get("/api/v1/jobs", params={"reason": list(reasons)})
    assert response.status_code == 200, response.text
    jobs: list[dict[str, Any]] = response.json()["jobs"]
    return jobs


def test_a_list_filters_on_the_pending_reason_code_and_the_reason_code(parked: Rest) -> None:
    first, second, third = (parked.submit(labels={"set": "why"}) for _ in range(3))
    assert first["pending_reason_code"] == "Scheduler"
    cancelled = parked.http.post(f"/api/v1/jobs/{third['id']}/cancel").json()["job"]
    assert (cancelled["reason_code"], cancelled["reason"]) == (
        "CancelledByUser",
        "cancelled by user",
    )

    wait_until(
        lambda: [j["id"] for j in _listed(parked, "capacity")] == [first["id"]],
        30,
        "the scheduler to say the first job waits for capacity",
    )
    [head] = _listed(parked, "Capacity")
    assert (head["pending_reason_code"], head["pending_reason"]) == (
        "Capacity", "needs 1 system, 0 free"
    )  # fmt: skip
    [behind] = _listed(parked, "BEHIND_HIGHER_PRIORITY")
    assert behind["id"] == second["id"]
    assert behind["pending_reason_code"] == "BehindHigherPriority"
    # Ended jobs too, without all=true; codes repeated or comma-separated.
    assert [j["id"] for j in _listed(parked, "CancelledByUser")] == [third["id"]]
    both = _listed(parked, "capacity,cancelledbyuser", "Quota")
    assert {j["id"] for j in both} == {first["id"], third["id"]}
    assert _listed(parked, "ReplicaFailed") == []

    refused = parked.http.get("/api/v1/jobs", params={"reason": "Sleepy"})
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["field"] == "reason" and "valid codes: Scheduler, Capacity" in error["message"]
    for empty in ("", ",,,", "Capacity,,Quota"):  # would list every job by mistake
        refused = parked.http.get("/api/v1/jobs", params={"reason": empty})
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["field"] == "reason" and "an empty reason code" in error["message"]
