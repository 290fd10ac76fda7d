"""The web door's rules over plain HTTP (no browser): the session cookie's attributes, CSRF
and origin checks, the same permissions as REST, hostile input refused as a page naming the
field (never a 500), and the live feed of changes."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.coordinator.harness import RunningCoordinator
from tests.integration.rest.conftest import SMALL_PARAMS, park_systems
from tests.integration.web.conftest import Dashboard


@pytest.fixture
def session(dashboard: Dashboard) -> Iterator[tuple[httpx.Client, str]]:
    """alice logged in: her client (with the cookie) and a CSRF token of her session."""
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
        answer = log_in(client, dashboard.tokens["alice"])
        assert answer.status_code == 303, answer.text
        yield client, csrf_of(client)


def csrf_of(client: httpx.Client, path: str = "/") -> str:
    page = client.get(path)
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found, page.text
    return found.group(1)


def log_in(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/ui/login", data={"token": token, "csrf": csrf_of(client, "/ui/login")})


def test_login_cookie_is_httponly_strict_and_the_token_stays_out_of_urls(
    dashboard: Dashboard,
) -> None:
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
        assert client.get("/").headers["location"] == "/ui/login"
        answer = log_in(client, dashboard.tokens["bob"])
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert dashboard.tokens["bob"] not in answer.headers["location"]
        assert ">bob<" in client.get("/").text
        refused = log_in(httpx.Client(base_url=dashboard.base_url), "x" * 600)
        assert refused.status_code == 422 and "token" in refused.text


def test_actions_need_this_sessions_csrf_token_and_this_origin(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, csrf = session
    dashboard.park()
    job = dashboard.submit("alice")
    cancel = f"/ui/jobs/{job}/cancel"
    assert client.post(cancel, data={"reason": "no token"}).status_code == 403
    assert client.post(cancel, data={"csrf": "0" * 40}).status_code == 403
    elsewhere = {"Origin": "http://evil.example"}
    answer = client.post(cancel, data={"csrf": csrf}, headers=elsewhere)
    assert answer.status_code == 403 and "evil.example" in answer.text
    with httpx.Client(base_url=dashboard.base_url) as bob:  # another session's token
        log_in(bob, dashboard.tokens["bob"])
        assert bob.post(cancel, data={"csrf": csrf}).status_code == 403
    assert dashboard.phase(job) == "QUEUED"
    same = {"Origin": dashboard.base_url}
    answer = client.post(cancel, data={"csrf": csrf}, headers=same)
    assert answer.status_code == 303 and dashboard.phase(job) == "CANCELLED"


def test_priority_labels_and_node_state_follow_the_apis_rules(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, csrf = session
    dashboard.park()
    job = dashboard.submit("alice")
    answer = client.post(f"/ui/jobs/{job}/priority", data={"csrf": csrf, "priority": "P0"})
    assert answer.status_code == 403 and "P0" in answer.text  # admins only, as over REST
    answer = client.post(f"/ui/jobs/{job}/priority", data={"csrf": csrf, "priority": "P1"})
    assert answer.status_code == 303
    answer = client.post(f"/ui/jobs/{job}/labels", data={"csrf": csrf, "set": "exp=7"})
    assert answer.status_code == 303
    with dashboard.api("alice") as api:
        shown = api.get(f"/api/v1/jobs/{job}").json()["spec"]
    assert shown["priority"].upper() == "P1" and shown["labels"] == {"exp": "7"}
    answer = client.post("/ui/nodes/cs2-01/state", data={"csrf": csrf, "state": "ok"})
    assert answer.status_code == 403 and "admin" in answer.text
    client.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})


def test_the_jobs_page_filters_with_kubectls_label_selectors(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, _ = session
    dashboard.park()
    nlp = dashboard.submit("alice", labels={"team": "nlp"})
    cv = dashboard.submit("alice", labels={"team": "cv", "exp": "3"})
    bare = dashboard.submit("alice")
    shown = {
        selector: {job for job in (nlp, cv, bare) if f'data-job="{job}"' in page.text}
        for selector in ("team!=nlp", "team in (cv,x)", "team notin (cv)", "!team", "exp")
        if (page := client.get("/ui/jobs", params={"label": selector})).status_code == 200
    }
    assert shown == {
        "team!=nlp": {cv, bare},
        "team in (cv,x)": {cv},
        "team notin (cv)": {nlp, bare},
        "!team": {bare},
        "exp": {cv},
    }


@pytest.mark.parametrize(
    ("method", "path", "data", "status", "field"),
    [
        ("GET", "/ui/jobs/wsjob-%3Cscript%3E", None, 422, "job_id"),
        ("GET", "/ui/jobs/" + "a" * 65, None, 422, "job_id"),
        ("GET", "/ui/jobs/wsjob-0a1b2c3d4e5f6g", None, 404, None),
        ("GET", "/ui/jobs/wsjob-%3Cscript%3E/curves", None, 422, "job_id"),
        ("GET", "/ui/jobs/wsjob-0a1b2c3d4e5f6g/curves", None, 404, None),
        ("GET", "/ui/jobs?label=a%3Db%2C%21%21", None, 422, "label"),
        ("GET", "/ui/jobs?phase=DONE", None, 422, "phase"),
        ("GET", "/ui/jobs?user=" + "u" * 300, None, 422, "user"),
        ("GET", "/ui/queues?by=nobody", None, 422, "by"),
        ("GET", "/ui/queues?since=yesterday-ish", None, 422, "since"),
        ("POST", "/ui/jobs/{job}/priority", {"priority": "P9"}, 422, "priority"),
        ("POST", "/ui/jobs/{job}/labels", {"set": "bad label"}, 422, "set"),
        ("POST", "/ui/jobs/{job}/labels", {"set": "k=" + "v" * 5000}, 422, "set"),
        ("POST", "/ui/jobs/{job}/cancel", {"reason": "r" * 3000}, 422, "reason"),
        ("POST", "/ui/nodes/cs2-99/state", {"state": "ok"}, 403, None),
    ],
)
def test_hostile_input_is_refused_with_a_page_naming_the_field(
    dashboard: Dashboard,
    session: tuple[httpx.Client, str],
    method: str,
    path: str,
    data: dict[str, str] | None,
    status: int,
    field: str | None,
) -> None:
    client, csrf = session
    if "{job}" in path:
        dashboard.park()
        path = path.format(job=dashboard.submit("alice"))
    if method == "GET":
        answer = client.get(path)
    else:
        answer = client.post(path, data={"csrf": csrf, **(data or {})})
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert 'id="error"' in answer.text
    if field:
        assert f'<code id="error-field">{field}</code>' in answer.text


def test_a_job_page_as_plain_html_offers_no_cancel_once_the_job_ended(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    """Ended, a job takes no cancel or new priority: its page (without scripts) offers none;
    its curves are JSON, none yet for a job that never ran."""
    client, csrf = session
    dashboard.park()
    job = dashboard.submit("alice")
    assert 'id="cancel"' in client.get(f"/ui/jobs/{job}").text
    client.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})
    assert dashboard.phase(job) == "CANCELLED"
    ended = client.get(f"/ui/jobs/{job}").text
    assert 'id="cancel"' not in ended and 'id="set-priority"' not in ended
    assert 'id="set-labels"' in ended  # labels still mark a finished job
    curves = client.get(f"/ui/jobs/{job}/curves")
    assert curves.headers["content-type"] == "application/json"
    assert curves.json() == {"train": [], "eval": [], "thinned": False, "problem": ""}


def test_the_change_feed_says_changed_on_a_submit_a_relabel_and_a_node_state(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    """Each change a list shows is announced (a read times out, well before the 15 s
    keep-alive, if one is not)."""
    client, csrf = session
    dashboard.park()
    with client.stream("GET", "/ui/stream", timeout=5) as feed:
        assert feed.headers["content-type"].startswith("text/event-stream")
        lines = feed.iter_lines()
        job = dashboard.submit("alice")
        assert next(line for line in lines if line.startswith("event:")) == "event: changed"
        with dashboard.api("alice") as api:
            api.patch(f"/api/v1/jobs/{job}", json={"labels": {"set": {"seen": "yes"}}})
        assert next(line for line in lines if line.startswith("event:")) == "event: changed"
        with dashboard.api("root") as api:
            api.put("/api/v1/nodes/memx-04/state", json={"state": "drain"})
        assert next(line for line in lines if line.startswith("event:")) == "event: changed"
    with dashboard.api("root") as api:
        api.put("/api/v1/nodes/memx-04/state", json={"state": "ok"})
    client.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})


def test_docs_use_no_outside_assets(dashboard: Dashboard) -> None:
    page = httpx.get(f"{dashboard.base_url}/docs").text
    assert "/ui/static/vendor/swagger-ui-bundle.js" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), page


def test_a_forged_or_revoked_session_goes_back_to_the_login(dashboard: Dashboard) -> None:
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
        client.cookies.set("appliance_session", "forged")
        assert client.get("/ui/cluster").headers["location"] == "/ui/login"
        with client.stream("GET", "/ui/stream") as feed:
            assert feed.status_code == 303


def test_the_cookie_is_an_opaque_session_id_that_logout_ends(dashboard: Dashboard) -> None:
    """Not the token: a leaked cookie is no API credential, and replayed after the logout (or
    forged) it is refused."""
    bob = dashboard.tokens["bob"]
    with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
        answer = log_in(client, bob)
        session_id = client.cookies["appliance_session"]
        assert session_id != bob and bob not in answer.headers["set-cookie"]
        assert ">bob<" in client.get("/").text
        as_bearer = {"Authorization": f"Bearer {session_id}"}
        assert client.get("/api/v1/jobs", headers=as_bearer).status_code == 401
        answer = client.post("/ui/logout", data={"csrf": csrf_of(client)})
        assert answer.status_code == 303 and "appliance_session" not in client.cookies
    for replayed in (session_id, secrets.token_urlsafe(32)):
        with httpx.Client(base_url=dashboard.base_url, timeout=30) as client:
            client.cookies.set("appliance_session", replayed)
            assert client.get("/ui/cluster").headers["location"] == "/ui/login"
            with client.stream("GET", "/ui/stream") as feed:
                assert feed.status_code == 303


PAGES = ["/", "/ui/queue", "/ui/jobs", "/ui/cluster", "/ui/queues", "/ui/login"]


def test_pages_may_not_be_framed_and_load_only_this_sites_files(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, _ = session
    for path in [*PAGES, "/ui/jobs/wsjob-000000000000"]:  # an error page too
        answer = client.get(path)
        assert answer.headers["x-frame-options"] == "DENY", path
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy, policy
        assert "unsafe" not in policy
    docs = client.get("/docs")  # Swagger UI's inline script: not framed, no stricter policy
    assert docs.headers["x-frame-options"] == "DENY"
    assert docs.headers["content-security-policy"] == "frame-ancestors 'none'"


def test_pages_answer_head_and_the_feeds_do_not(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, _ = session
    for path in PAGES:
        answer = client.head(path)
        assert answer.status_code == 200 and answer.content == b"", path
        assert answer.headers["content-type"].startswith("text/html")
    assert client.head("/ui/stream").status_code == 405  # its body never ends


def test_with_authentication_off_there_is_nothing_to_log_in_to(tmp_path: Path) -> None:
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        base = f"https://127.0.0.1:{running.coordinator.http_port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            assert "Authentication is off" in client.get("/ui/login").text
            answer = client.post("/ui/login", data={"token": "anything"})
            assert answer.status_code == 303 and answer.headers["location"] == "/"
            assert "set-cookie" not in answer.headers and not client.cookies
    finally:
        running.stop()


def test_without_authentication_every_caller_acts_as_rest_allows(tmp_path: Path) -> None:
    park_systems(tmp_path / "data")
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        base = f"https://127.0.0.1:{running.coordinator.http_port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            page = client.get("/")
            assert page.status_code == 200 and "authentication off" in page.text
            body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2}
            job = client.post("/api/v1/jobs", json=body).json()["id"]
            assert job in client.get("/").text
            csrf = csrf_of(client, f"/ui/jobs/{job}")
            answer = client.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})
            assert answer.status_code == 303
            assert client.get(f"/api/v1/jobs/{job}").json()["phase"] == "CANCELLED"
    finally:
        running.stop()
