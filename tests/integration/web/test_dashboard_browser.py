"""The dashboard in a real browser (headless chromium): log in, watch the queue and a job
change live, act (cancel, drain), be refused, and read /docs offline. Screenshots of each
page are saved (see conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests import timing
from tests.integration.web.conftest import Dashboard

WAIT = timing.scaled(30.0)
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def wait_for(browser: Any, what: str, check: Any, timeout: float = WAIT) -> Any:
    wait = WebDriverWait(
        browser, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    )
    return wait.until(lambda driver: check(driver), message=f"waiting for {what}")


def text(browser: Any, css: str) -> str:
    """The element's text, read in one step (htmx may swap it between two WebDriver calls)."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(browser.execute_script(script, css)).strip()


def state_of(browser: Any, node: str) -> str:
    script = "const e = document.querySelector(arguments[0]); return e ? e.dataset.state : '';"
    return str(browser.execute_script(script, f"li[data-node='{node}']"))


def log_in(browser: Any, dashboard: Dashboard, user: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{dashboard.base_url}/ui/login")
    browser.find_element(By.ID, "token").send_keys(dashboard.tokens[user])
    browser.find_element(By.ID, "login").click()
    wait_for(browser, f"{user} logged in", lambda d: text(d, "#who").startswith(user))


def csp_violations(browser: Any) -> list[str]:
    """What this page's Content-Security-Policy blocked (conftest.WATCH_CSP records it)."""
    return list(browser.execute_script("return window.__cspViolations || ['not watched'];"))


def mark_page(browser: Any) -> None:
    """A mark that a reload would wipe: what changes while it stays came live."""
    browser.execute_script("window.__notReloaded = true;")


def not_reloaded(browser: Any) -> bool:
    return bool(browser.execute_script("return window.__notReloaded === true;"))


def test_login_sets_an_httponly_cookie_and_logout_ends_it(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    browser.delete_all_cookies()
    browser.get(f"{dashboard.base_url}/")
    assert browser.current_url.endswith("/ui/login")
    browser.find_element(By.ID, "token").send_keys("not-a-token")
    browser.find_element(By.ID, "login").click()
    wait_for(browser, "the refusal", lambda d: "not recognised" in text(d, "#error"))
    browser.save_screenshot(str(shots / "login-refused.png"))

    log_in(browser, dashboard, "alice")
    assert browser.current_url == f"{dashboard.base_url}/"
    assert dashboard.tokens["alice"] not in browser.current_url
    cookie = browser.get_cookie("appliance_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert dashboard.tokens["alice"] not in browser.execute_script("return document.cookie;")

    browser.find_element(By.XPATH, "//button[text()='Log out']").click()
    wait_for(browser, "the login form", lambda d: d.current_url.endswith("/ui/login"))
    assert browser.get_cookie("appliance_session") is None
    browser.get(f"{dashboard.base_url}/ui/jobs")
    assert browser.current_url.endswith("/ui/login")


def test_queue_and_job_pages_follow_changes_live(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    first = dashboard.submit("alice", num_steps=300, labels={"team": "nlp"})
    log_in(browser, dashboard, "alice")
    row = f"#queue-table tr[data-job='{first}']"
    wait_for(browser, "the queued job", lambda d: d.find_elements(By.CSS_SELECTOR, row))
    mark_page(browser)
    second = dashboard.submit("alice")  # appears without a reload: the SSE feed said so
    wait_for(
        browser, "the second job, live",
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#queue-table tr[data-job='{second}']"),
    )  # fmt: skip
    assert not_reloaded(browser)
    cells = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(c => c.innerText);", f"{row} td"
    )
    assert cells[1] == "1" and cells[3] == "alice" and cells[4] == "P2" and cells[6], cells
    browser.save_screenshot(str(shots / "queue.png"))

    # Click through to the job (again if a live refresh swapped the link meanwhile).
    wait_for(browser, "the job's link", lambda d: d.find_element(By.LINK_TEXT, first).click() or 1)
    wait_for(browser, "the job page", lambda d: text(d, "#phase") == "QUEUED")
    wait_for(browser, "its recorded events", lambda d: "QUEUED" in text(d, "#events-table"))
    mark_page(browser)
    with dashboard.api("root") as api:  # a system comes back: the job runs
        answer = api.put("/api/v1/nodes/cs2-01/state", json={"state": "ok", "reason": "fixed"})
        assert answer.status_code == 200, answer.text
    wait_for(browser, "RUNNING, live", lambda d: text(d, "#phase") in {"RUNNING", *TERMINAL})
    wait_for(browser, "curve points", lambda d: int(
        d.find_element(By.ID, "chart").get_attribute("data-points") or 0) >= 2)  # fmt: skip
    wait_for(browser, "log lines", lambda d: "chief-0" in text(d, "#log"))
    learning_rate = browser.find_element(By.ID, "chart").get_attribute("data-learning-rate")
    assert float(learning_rate or 0) > 0, "the learning rate is drawn from progress reports"
    wait_for(browser, "the end, live", lambda d: text(d, "#phase") == "SUCCEEDED", 90)
    assert not_reloaded(browser)
    assert "RUNNING" in text(browser, "#events-table")
    assert "cs2-01" in text(browser, "#replicas-table")
    wait_for(browser, "the whole log", lambda d: "ended" in text(d, "#log-status"))
    assert csp_violations(browser) == []  # the live page works under the strict policy
    browser.save_screenshot(str(shots / "job.png"))
    browser.execute_script("document.getElementById('chart').scrollIntoView();")
    browser.save_screenshot(str(shots / "job-curves-and-log.png"))
    dashboard.park()
    with dashboard.api("alice") as api:
        api.post(f"/api/v1/jobs/{second}/cancel")


def test_cancel_is_refused_to_another_user_and_done_for_the_owner(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    job = dashboard.submit("alice")
    log_in(browser, dashboard, "bob")
    browser.get(f"{dashboard.base_url}/ui/jobs/{job}")
    browser.find_element(By.ID, "cancel").click()
    wait_for(browser, "the refusal", lambda d: "Refused (403)" in text(d, "h1"))
    assert "bob may not cancel" in text(browser, "#error"), text(browser, "#error")
    browser.save_screenshot(str(shots / "cancel-refused.png"))
    assert dashboard.phase(job) == "QUEUED"

    log_in(browser, dashboard, "alice")
    browser.get(f"{dashboard.base_url}/ui/jobs/{job}")
    browser.find_element(By.ID, "cancel").click()
    wait_for(browser, "the job cancelled", lambda d: text(d, "#phase") == "CANCELLED")
    assert dashboard.phase(job) == "CANCELLED"


def test_an_admin_drains_a_system_from_the_cluster_picture(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    booked = {"name": "fans", "systems": ["cs2-03"], "maint": True, "duration": 3600}
    with dashboard.api("root") as api:
        assert api.post("/api/v1/reservations", json=booked).status_code == 201
        log_in(browser, dashboard, "root")
        browser.get(f"{dashboard.base_url}/ui/cluster")
        assert "cs2-03" in text(browser, "tr[data-reservation='fans'] td.nodes")  # its window
        assert api.delete("/api/v1/reservations/fans").status_code == 204
    tile = "li[data-node='cs2-02']"
    assert state_of(browser, "cs2-02") == "maintenance"
    assert len(browser.find_elements(By.CSS_SELECTOR, "li.tile")) == 4 + 4 + 2 + 2  # + workers
    Select(browser.find_element(By.ID, "state-cs2-02")).select_by_value("drain")
    browser.find_element(By.ID, "reason-cs2-02").send_keys("fan swap")
    browser.find_element(By.ID, "set-cs2-02").click()
    wait_for(browser, "the tile drained", lambda d: state_of(d, "cs2-02") == "drain")
    assert "fan swap" in text(browser, tile)
    assert csp_violations(browser) == []
    browser.save_screenshot(str(shots / "cluster.png"))

    log_in(browser, dashboard, "bob")  # no admin: no state forms to use
    browser.get(f"{dashboard.base_url}/ui/cluster")
    assert browser.find_elements(By.CSS_SELECTOR, "li.tile")
    assert not browser.find_elements(By.CSS_SELECTOR, "form.node-form")
    dashboard.park()


def test_jobs_filters_keyboard_and_hostile_input(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    labelled = dashboard.submit("bob", labels={"exp": "web"})
    plain = dashboard.submit("bob")
    log_in(browser, dashboard, "bob")
    browser.get(f"{dashboard.base_url}/ui/jobs")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)  # the first stop is the skip link, and focus shows
    focused = browser.switch_to.active_element
    assert focused.text == "Skip to content"
    assert focused.value_of_css_property("outline-style") == "solid"

    browser.find_element(By.ID, "f-label").send_keys("exp=web")
    browser.find_element(By.ID, "f-mine").click()
    browser.find_element(By.ID, "filter").click()
    wait_for(
        browser, "the filtered list",
        lambda d: "label=exp%3Dweb" in d.current_url and labelled in text(d, "#jobs-table"),
    )  # fmt: skip
    listed = text(browser, "#jobs-table")
    assert labelled in listed and plain not in listed
    browser.save_screenshot(str(shots / "jobs.png"))

    field = browser.find_element(By.ID, "f-label")
    field.clear()
    field.send_keys("exp=web,bad label")
    browser.find_element(By.ID, "filter").click()
    wait_for(browser, "the refusal", lambda d: "Refused (422)" in text(d, "h1"))
    assert text(browser, "#error-field") == "label"
    for job in (labelled, plain):
        with dashboard.api("bob") as api:
            api.post(f"/api/v1/jobs/{job}/cancel")


def test_docs_load_from_local_assets(browser: Any, dashboard: Dashboard, shots: Path) -> None:
    browser.get(f"{dashboard.base_url}/docs")
    wait_for(browser, "Swagger UI", lambda d: "appliance" in text(d, ".swagger-ui .info .title"))
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);"
    )
    assert loaded and all(url.startswith(dashboard.base_url) for url in loaded), loaded
    browser.save_screenshot(str(shots / "docs.png"))
    assert httpx.get(f"{dashboard.base_url}/openapi.json").status_code == 200


AXE = Path(__file__).parents[3] / "deploy/web/node_modules/axe-core/axe.min.js"


def accessibility_violations(browser: Any) -> list[str]:
    """axe-core's WCAG 2 A/AA findings on the page as it stands (contrast, names, labels)."""
    browser.execute_script(AXE.read_text())
    found = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})"
        ".then(r => done(r.violations.map("
        "  v => v.id + ': ' + v.nodes.map(n => n.target).join(' '))))"
        ".catch(e => done(['axe failed: ' + e]));"
    )
    return list(found)


def test_every_page_passes_wcag_aa_checks(browser: Any, dashboard: Dashboard) -> None:
    """Readable contrast, names on every control, labels on every field: axe-core (pinned in
    deploy/web) on each page with content, as an admin sees it (the most controls)."""
    if not AXE.is_file():
        why = f"{AXE} is missing: make test installs it with npm (deploy/web/build.sh --deps)"
        if os.environ.get("APPLIANCE_REQUIRE_BROWSER") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    dashboard.park()
    job = dashboard.submit("root", labels={"team": "nlp"})
    log_in(browser, dashboard, "root")
    browser.set_script_timeout(WAIT)
    found = {}
    for path in ("/", "/ui/jobs?all=true", "/ui/cluster", "/ui/queues", f"/ui/jobs/{job}"):
        browser.get(f"{dashboard.base_url}{path}")
        wait_for(browser, f"{path} drawn", lambda d: text(d, "main") != "")
        found[path] = accessibility_violations(browser)
    assert found == {path: [] for path in found}


def test_going_from_page_to_page_never_holds_the_browsers_connections(
    browser: Any, dashboard: Dashboard
) -> None:
    """Each page's event streams close when it is left. A page kept in the back-forward cache
    (on in chromium) kept them open: after a job page and two more, all six of the browser's
    connections to the coordinator were held and the next page never loaded. Back to a cached
    page reloads it, live again."""
    dashboard.park()
    job = dashboard.submit("root")
    log_in(browser, dashboard, "root")
    pages = ("/", "/ui/jobs?all=true", "/ui/cluster", "/ui/queues", f"/ui/jobs/{job}")
    for path in pages * 3:
        browser.get(f"{dashboard.base_url}{path}")
        wait_for(browser, f"{path} drawn", lambda d: text(d, "main") != "")
    browser.get(f"{dashboard.base_url}/ui/queues")
    browser.back()
    wait_for(browser, "the job page again", lambda d: text(d, "#phase") == "QUEUED")
    mark_page(browser)
    with dashboard.api("root") as api:
        assert api.post(f"/api/v1/jobs/{job}/cancel").status_code == 200
    wait_for(browser, "CANCELLED, live", lambda d: text(d, "#phase") == "CANCELLED")
    assert not_reloaded(browser)
