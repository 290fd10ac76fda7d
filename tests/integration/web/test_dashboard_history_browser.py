"""The dashboard shows history (issue #32): a job's curves from its first step on a page opened
at any time, its evaluations, axes a reader can read, no cancel once it ended, replica states
that settle with it; the cluster page's totals and the queue by what it waits for."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from selenium.webdriver.common.by import By

from tests.integration.web.conftest import Dashboard
from tests.integration.web.test_dashboard_browser import (
    AXE,
    TERMINAL,
    accessibility_violations,
    csp_violations,
    log_in,
    mark_page,
    not_reloaded,
    state_of,
    text,
    wait_for,
)

# Every step logged, an evaluation every 5 steps, a learning rate whose ticks read "0" before.
LOGGED = (
    "model: {name: fc_mnist, hidden_sizes: [4]}\n"
    "optimizer: {learning_rate: 0.003}\n"
    "runconfig: {log_steps: 1, eval_steps: 5}\n"
)
UNSETTLED = ("PENDING", "STARTED", "READY")


def chart(browser: Any, name: str) -> str:
    """A data attribute the job page's chart keeps (dashboard.js)."""
    script = "const e = document.getElementById('chart'); return e ? e.dataset[arguments[0]] : '';"
    return str(browser.execute_script(script, name) or "")


def replica_phases(browser: Any) -> list[str]:
    script = (
        "return [...document.querySelectorAll('#replicas-table tbody tr')]"
        ".map(r => r.cells.length > 3 ? r.cells[3].innerText : '');"
    )
    return list(browser.execute_script(script))


@contextlib.contextmanager
def one_system(dashboard: Dashboard) -> Iterator[httpx.Client]:
    """cs2-01 back in service for the block (what waits runs), then every system parked."""
    with dashboard.api("root") as api:
        answer = api.put("/api/v1/nodes/cs2-01/state", json={"state": "ok", "reason": "test"})
        assert answer.status_code == 200, answer.text
        try:
            yield api
        finally:
            dashboard.park()


def step(api: httpx.Client, job: str) -> int:
    return int(api.get(f"/api/v1/jobs/{job}").json()["progress"]["step"])


def test_an_ended_job_shows_its_curves_from_the_first_step_with_its_evaluations(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    job = dashboard.submit("alice", params=LOGGED, num_steps=20, mode="train_and_eval")
    with one_system(dashboard) as api:
        # The REST answer is the synchronisation: the page is opened after the job's end.
        wait_for(browser, "the job's end", lambda _: dashboard.phase(job) in TERMINAL, 90)
        assert dashboard.phase(job) == "SUCCEEDED"
        shown = api.get(f"/api/v1/jobs/{job}").json()
    log_in(browser, dashboard, "alice")
    browser.get(f"{dashboard.base_url}/ui/jobs/{job}")
    wait_for(browser, "the curves read", lambda d: chart(d, "loaded") == "true")
    assert chart(browser, "firstStep") == "1", "the curve starts at the job's first step"
    assert (chart(browser, "points"), chart(browser, "lastStep")) == ("20", "20")
    assert chart(browser, "evalPoints") == "4", "an evaluation every 5 steps, each drawn"
    assert browser.find_elements(By.CSS_SELECTOR, "#accuracy-chart canvas")
    status = text(browser, "#curves-status")
    accuracy = 100 * shown["progress"]["eval_accuracy"]
    assert "from step 1 to 20" in status and f"accuracy {accuracy:.1f}%" in status, status

    rate_ticks = chart(browser, "lrTicks").split()
    assert len(rate_ticks) >= 2 and len(set(rate_ticks)) == len(rate_ticks), rate_ticks
    values = [float(t) for t in rate_ticks]  # the learning rate is 0.003 throughout
    assert min(values) <= 0.003 <= max(values) and max(values) < 0.1, rate_ticks
    loss_ticks = chart(browser, "lossTicks").split()
    assert len(set(loss_ticks)) == len(loss_ticks) >= 2, loss_ticks

    assert not browser.find_elements(By.ID, "cancel"), "no cancel on an ended job"
    assert not browser.find_elements(By.ID, "set-priority")
    wait_for(browser, "replicas ended", lambda d: not set(replica_phases(d)) & set(UNSETTLED))
    assert csp_violations(browser) == []  # the curves' fetch is this site's
    browser.execute_script("document.getElementById('chart').scrollIntoView();")
    browser.save_screenshot(str(shots / "job-history.png"))
    if AXE.is_file():
        assert accessibility_violations(browser) == []


def test_a_page_opened_mid_run_draws_from_step_one_then_goes_on_live(
    browser: Any, dashboard: Dashboard
) -> None:
    dashboard.park()
    job = dashboard.submit("alice", params=LOGGED, num_steps=1_000_000)
    with one_system(dashboard) as api:
        try:
            wait_for(browser, "steps done first", lambda _: step(api, job) >= 50, 90)
            log_in(browser, dashboard, "alice")
            browser.get(f"{dashboard.base_url}/ui/jobs/{job}")
            wait_for(browser, "the curves read", lambda d: chart(d, "loaded") == "true")
            mark_page(browser)
            assert chart(browser, "firstStep") == "1", "not the step where the page was opened"
            opened_at = int(chart(browser, "lastStep"))
            assert opened_at >= 50
            wait_for(browser, "live points after the history",
                     lambda d: int(chart(d, "lastStep") or 0) > opened_at + 5)  # fmt: skip
            assert chart(browser, "firstStep") == "1" and not_reloaded(browser)
        finally:
            api.post(f"/api/v1/jobs/{job}/cancel")


def test_replica_states_settle_with_the_job_and_cancel_goes_when_it_ends(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    """The page refreshes its live part on the job's last phase event; replicas the teardown
    stops exit after it. One made to end late (stopped, it exits only when continued) shows
    READY at that refresh: it must not stay so."""
    dashboard.park()
    job = dashboard.submit("alice", num_steps=1_000_000)
    stopped = 0
    try:
        with one_system(dashboard) as api:
            wait_for(browser, "steps done", lambda _: step(api, job) >= 5, 90)
            log_in(browser, dashboard, "alice")
            browser.get(f"{dashboard.base_url}/ui/jobs/{job}")
            wait_for(browser, "every replica ready", lambda d: set(replica_phases(d)) == {"READY"})
            mark_page(browser)
            assert browser.find_elements(By.ID, "cancel")
            replicas = api.get(f"/api/v1/jobs/{job}").json()["replicas"]
            stopped = next(r["pid"] for r in replicas if r["name"] == "cs2-0")
            os.kill(stopped, signal.SIGSTOP)
            assert api.post(f"/api/v1/jobs/{job}/cancel").status_code == 200
            wait_for(browser, "CANCELLED, live", lambda d: text(d, "#phase") == "CANCELLED")
            assert "READY" in replica_phases(browser), replica_phases(browser)
            os.kill(stopped, signal.SIGCONT)
            stopped = 0
            wait_for(browser, "replicas settled, live",
                     lambda d: not set(replica_phases(d)) & set(UNSETTLED))  # fmt: skip
            assert not browser.find_elements(By.ID, "cancel"), "no cancel once it ended"
            assert not_reloaded(browser)
            browser.save_screenshot(str(shots / "job-settled.png"))
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        with dashboard.api("alice") as api:
            api.post(f"/api/v1/jobs/{job}/cancel")


def test_the_cluster_page_sums_up_the_pool_and_the_queue(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    dashboard.park()
    waiting = [dashboard.submit("bob"), dashboard.submit("bob", num_csx=2)]
    log_in(browser, dashboard, "root")
    browser.get(f"{dashboard.base_url}/ui/cluster")

    def row(kind: str) -> list[str]:
        script = "return [...document.querySelectorAll(arguments[0])].map(c => c.innerText);"
        return list(browser.execute_script(script, f"#totals tr[data-kind='{kind}'] td"))

    assert row("system") == ["4", "0", "0", "4 (4 maintenance)", "0 of 4"]
    assert row("memoryx") == ["4", "0", "4", "0", "0 GiB of 64 GiB"]
    assert row("swarmx") == ["2", "0", "2", "0", "0 ports of 8 ports"]
    assert text(browser, "li[data-node='memx-01'] .in-use") == "0 GiB of 16 GiB"
    assert text(browser, "li[data-node='swarmx-01'] .in-use") == "0 ports of 4 ports"
    assert row("worker") == ["2", "0", "2", "0", "0 slots of 16 slots"]
    assert text(browser, "li[data-node='worker-02'] .in-use") == "0 slots of 8 slots"

    with dashboard.api("root") as api:

        def by_reason() -> dict[str, int]:
            queued = api.get("/api/v1/jobs", params={"phase": "QUEUED", "limit": 1000}).json()
            counts: dict[str, int] = {}
            for job in queued["jobs"]:
                code = job["pending_reason_code"] or "-"
                counts[code] = counts.get(code, 0) + 1
            return counts

        def shown() -> dict[str, int]:
            script = (
                "const rows = document.querySelectorAll('#waiting tr[data-reason]');"
                "return Object.fromEntries([...rows]"
                ".map(r => [r.dataset.reason, Number(r.querySelector('.count').innerText)]));"
            )
            return dict(browser.execute_script(script))

        wait_for(browser, "the queue by reason, as REST lists it",
                 lambda _: shown() == by_reason() and sum(shown().values()) >= 2)  # fmt: skip
        total = sum(shown().values())
        assert text(browser, "#queued-total").startswith(f"{total} jobs queued")

    for tile in browser.find_elements(By.CSS_SELECTOR, "li.tile"):
        name = tile.get_attribute("data-node")
        chosen = browser.execute_script(
            "return document.getElementById(arguments[0]).value;", f"state-{name}"
        )
        assert chosen == state_of(browser, name), f"{name}'s form defaults to {chosen}"
    browser.save_screenshot(str(shots / "cluster-totals.png"))
    with dashboard.api("bob") as api:
        for job in waiting:
            api.post(f"/api/v1/jobs/{job}/cancel")
