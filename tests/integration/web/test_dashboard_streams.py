"""The dashboard's log feed and the REST log stream against a coordinator whose jobs run: a
token revoked mid-stream ends both (as it ends the event streams), and the feed sends only a
long log's tail."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from appliance.server.auth import create_token
from appliance.server.web.streams import LOG_TAIL
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.rest.conftest import SMALL_PARAMS
from tests.integration.web.test_dashboard_http import log_in


class Running:
    """A coordinator with authentication on (root, and eve whose token a test revokes)."""

    def __init__(self, running: RunningCoordinator, tokens_file: Path, root: str, eve: str):
        self.running = running
        self.tokens_file = tokens_file
        self.base_url = f"https://127.0.0.1:{running.coordinator.http_port}"
        self.root = root
        self.eve = eve

    def api(self, token: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def submit(self, token: str, num_steps: int) -> str:
        body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": num_steps}
        with self.api(token) as api:
            answer = api.post("/api/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def phase(self, job_id: str) -> str:
        with self.api(self.root) as api:
            return str(api.get(f"/api/v1/jobs/{job_id}").json()["phase"])

    def revoke(self, user: str) -> None:
        """As an admin does: the user's entries removed from the tokens file."""
        entries = yaml.safe_load(self.tokens_file.read_text())["tokens"]
        kept = [e for e in entries if e["user"] != user]
        self.tokens_file.write_text(yaml.safe_dump({"tokens": kept}))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Running]:
    tokens_file = tmp_path / "tokens.yaml"
    root = create_token(tokens_file, "root", [], admin=True)
    eve = create_token(tokens_file, "eve", ["nlp"], admin=False)
    with serving(tmp_path / "data", auth_tokens_file=tokens_file) as running:
        served = Running(running, tokens_file, root, eve)
        try:
            yield served
        finally:
            with served.api(served.root) as api:
                for job in api.get("/api/v1/jobs").json()["jobs"]:
                    api.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_a_revoked_token_ends_the_web_and_rest_log_streams(cluster: Running) -> None:
    job_id = cluster.submit(cluster.eve, 1_000_000)
    wait_until(lambda: cluster.phase(job_id) == "RUNNING", 60, "the job to run")
    ended: dict[str, str] = {}
    lines = {"web": 0, "rest": 0}
    opened = threading.Barrier(3)

    def web() -> None:
        with httpx.Client(base_url=cluster.base_url, timeout=60) as browser:
            assert log_in(browser, cluster.eve).status_code == 303
            with browser.stream("GET", f"/ui/jobs/{job_id}/logs") as feed:
                assert feed.status_code == 200
                opened.wait()
                for line in feed.iter_lines():
                    if line.startswith("event: "):
                        ended["web"] = line.removeprefix("event: ")
                    elif line.startswith("data: ") and ended.get("web") == "log":
                        lines["web"] += 1
                    elif line.startswith("data: "):
                        ended["web"] += " " + json.loads(line[6:])["error"]["code"]

    def rest() -> None:
        with cluster.api(cluster.eve) as api:
            url = f"/api/v1/jobs/{job_id}/logs"
            with api.stream("GET", url, params={"follow": True}) as streamed:
                assert streamed.status_code == 200
                opened.wait()
                for line in streamed.iter_lines():
                    lines["rest"] += 1
                    ended["rest"] = line

    threads = [threading.Thread(target=web), threading.Thread(target=rest)]
    for thread in threads:
        thread.start()
    opened.wait()
    wait_until(lambda: lines["web"] > 0 and lines["rest"] > 0, 30, "both streams to send lines")
    cluster.revoke("eve")
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), (lines, ended)
    assert cluster.phase(job_id) == "RUNNING"  # they ended because of the token, not the job
    assert ended["web"] == "error unauthenticated", ended
    assert ended["rest"].startswith("error: the token is not recognised"), ended


def test_the_log_feed_sends_a_long_logs_tail_only(cluster: Running) -> None:
    job_id = cluster.submit(cluster.root, 2)
    wait_until(lambda: cluster.phase(job_id) == "SUCCEEDED", 60, "the job to succeed")
    written = [f"line {n}" for n in range(3 * LOG_TAIL)]
    backend = cluster.running.coordinator.backend
    with backend.log_path(job_id, "chief-0").open("a") as log:  # type: ignore[attr-defined]
        log.write("".join(f"{line}\n" for line in written))

    sent: list[str] = []
    with httpx.Client(base_url=cluster.base_url, timeout=30) as browser:
        assert log_in(browser, cluster.root).status_code == 303
        with browser.stream("GET", f"/ui/jobs/{job_id}/logs") as feed:
            for line in feed.iter_lines():
                if line.startswith("data: ") and '"replica": "chief-0"' in line:
                    sent.extend(json.loads(line[6:])["lines"])
    assert sent == written[-LOG_TAIL:]
