"""The dashboard's actions and logins in the audit log (#36): one record each, door web, with
the session's user; refusals (another's job, a bad token) recorded too, never the token."""

from __future__ import annotations

import httpx

from tests.integration.coordinator.harness import wait_until
from tests.integration.web.conftest import Dashboard
from tests.integration.web.test_dashboard_http import csrf_of, log_in


def test_actions_and_logins_are_recorded_once_with_who(dashboard: Dashboard) -> None:
    job_id = dashboard.submit("alice")
    tokens = dashboard.tokens
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as bob:
        assert log_in(bob, tokens["bob"]).status_code == 303
        refused = bob.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(bob)})
        assert refused.status_code == 403
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as stranger:
        assert log_in(stranger, "not-a-token").status_code == 401
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as root:
        assert log_in(root, tokens["root"]).status_code == 303
        drained = root.post(
            "/ui/nodes/cs2-04/state", data={"csrf": csrf_of(root), "state": "drain"}
        )
        assert drained.status_code == 303, drained.text
        cancelled = root.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(root)})
        assert cancelled.status_code == 303, cancelled.text

    expected = [
        ("bob", "login", "", "allowed"),
        ("bob", "cancel", f"job/{job_id}", "refused"),
        ("", "login", "", "refused"),
        ("root", "login", "", "allowed"),
        ("root", "node-drain", "node/cs2-04", "allowed"),
        ("root", "cancel", f"job/{job_id}", "allowed"),
    ]

    def web_records() -> list[dict[str, object]]:
        with dashboard.api("root") as api:
            events = api.get("/api/v1/audit", params={"limit": 1000}).json()["events"]
        return [e for e in reversed(events) if e["door"] == "web"]

    def seen() -> list[tuple[object, ...]]:
        return [
            (e["user"], e["verb"], _target(e["object"]), e["outcome"])  # type: ignore[arg-type]
            for e in web_records()
        ]

    wait_until(lambda: len(seen()) >= len(expected), 10, "the dashboard's records")
    assert seen() == expected
    text = str(web_records())
    assert not any(token in text for token in [*tokens.values(), "not-a-token"])


def _target(found: dict[str, str]) -> str:
    return f"{found['kind']}/{found['name']}" if found["name"] else found["kind"]
