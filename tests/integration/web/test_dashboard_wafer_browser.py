"""The cluster page shows a pipelined and a weight-streaming job side by side (#34): the pipelined
one holds a CS-2 only, the streaming one a CS-2, a MemoryX and a SwarmX."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.domain.inventory import NodeState
from tests.integration.web.conftest import SYSTEMS, Dashboard
from tests.integration.web.test_dashboard_browser import log_in, wait_for

MODEL = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
LONG = 1_000_000  # steps: both jobs run for the whole test


def holders(browser: Any) -> dict[str, list[str]]:
    """Each tile's node and the jobs its links name."""
    script = (
        "return Object.fromEntries([...document.querySelectorAll('li.tile')]"
        ".map(t => [t.dataset.node, [...t.querySelectorAll('a')].map(a => a.innerText)]));"
    )
    return dict(browser.execute_script(script))


def test_the_cluster_page_shows_a_pipelined_job_on_one_cs2_and_nothing_else(
    browser: Any, dashboard: Dashboard, shots: Path
) -> None:
    store = dashboard.running.coordinator.ctx.store
    store.set_node_state(SYSTEMS[:2], NodeState.OK)
    try:
        pipelined = dashboard.submit(
            "bob",
            params=MODEL + "runconfig: {execution_strategy: pipeline}\n",
            num_steps=LONG,
        )
        streaming = dashboard.submit("bob", params=MODEL, num_steps=LONG)
        log_in(browser, dashboard, "root")
        browser.get(f"{dashboard.base_url}/ui/cluster")

        def placed(_: Any) -> dict[str, set[str]] | None:
            where: dict[str, set[str]] = {pipelined: set(), streaming: set()}
            for node, jobs in holders(browser).items():
                for job in jobs:
                    if job in where:
                        where[job].add(node.split("-")[0])
            return where if all(where.values()) and len(where[streaming]) == 3 else None

        where = wait_for(browser, "both jobs on the cluster's tiles", placed)
        assert where[pipelined] == {"cs2"}, where
        assert where[streaming] == {"cs2", "memx", "swarmx"}, where
        browser.save_screenshot(str(shots / "cluster-pipelined-and-streaming.png"))
    finally:
        with dashboard.api("bob") as api:
            for job in (pipelined, streaming):
                api.post(f"/api/v1/jobs/{job}/cancel")
        dashboard.park()
