"""Holds over REST and the dashboard (#37): the same rules as gRPC (services/holds.py), a
refusal one line naming what to do, nothing changed; the job page offers Hold to a queued job
and Release to a held one."""

from __future__ import annotations

import httpx

from tests.integration.web.conftest import Dashboard
from tests.integration.web.test_dashboard_http import csrf_of, log_in


def test_rest_holds_and_releases_by_the_same_rules(dashboard: Dashboard) -> None:
    dashboard.park()
    job = dashboard.submit("alice")
    with dashboard.api("bob") as bob:
        refused = bob.post(f"/api/v1/jobs/{job}/hold")
    assert refused.status_code == 403, refused.text
    assert "bob may not hold a job of alice" in refused.text
    with dashboard.api("root") as root:
        held = root.post(f"/api/v1/jobs/{job}/hold")
        assert held.status_code == 200, held.text
        body = held.json()
        assert body["changed"] and body["job"]["hold"] == {
            "kind": "admin", "by": "root", "suspended": False,
        }  # fmt: skip
        assert body["job"]["pending_reason_code"] == "HeldAdmin"
    with dashboard.api("alice") as alice:
        refused = alice.post(f"/api/v1/jobs/{job}/release")
        assert refused.status_code == 403, refused.text
        assert "only an admin may release it" in refused.text
        assert alice.get(f"/api/v1/jobs/{job}").json()["hold"]["kind"] == "admin"
        not_running = alice.post(f"/api/v1/jobs/{job}/suspend")
        assert not_running.status_code == 409 and "only a running job" in not_running.text
        missing = alice.post("/api/v1/jobs/wsjob-nosuchjob00000/hold")
        assert missing.status_code == 404
    with dashboard.api("root") as root:
        released = root.post(f"/api/v1/jobs/{job}/release").json()
        assert released["changed"] and released["job"]["hold"] is None
        root.post(f"/api/v1/jobs/{job}/cancel", json={})


def test_the_job_page_holds_and_releases_a_queued_job(dashboard: Dashboard) -> None:
    dashboard.park()
    job = dashboard.submit("alice")
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
        log_in(client, dashboard.tokens["alice"])
        page = client.get(f"/ui/jobs/{job}").text
        assert f'action="/ui/jobs/{job}/hold"' in page
        csrf = csrf_of(client, f"/ui/jobs/{job}")
        assert client.post(f"/ui/jobs/{job}/hold", data={"csrf": csrf}).status_code == 303
        page = client.get(f"/ui/jobs/{job}").text
        assert f'action="/ui/jobs/{job}/release"' in page and "held by alice" in page
        assert client.post(f"/ui/jobs/{job}/release", data={"csrf": csrf}).status_code == 303
        with dashboard.api("alice") as alice:
            assert alice.get(f"/api/v1/jobs/{job}").json()["hold"] is None
        client.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})
