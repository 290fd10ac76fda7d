"""REST: PATCH priority and labels, lease heartbeats, the pool, and bearer tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator
from tests.integration.rest.conftest import SMALL_PARAMS, Rest

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


def test_patch_priority_and_labels(parked: Rest) -> None:
    job = parked.submit(labels={"team": "nlp", "tmp": "x"})
    patched = parked.http.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"priority": "p1", "labels": {"set": {"team": "cv"}, "remove": ["tmp"]}},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["spec"]["priority"] == "P1"
    assert patched.json()["spec"]["labels"] == {"team": "cv"}
    bad = parked.http.patch(f"/api/v1/jobs/{job['id']}", json={"priority": "p9"})
    assert bad.status_code == 422 and bad.json()["error"]["field"]
    half_bad = parked.http.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"priority": "p3", "labels": {"set": {"bad key!": "x"}}},
    )
    assert half_bad.status_code == 422 and half_bad.json()["error"]["field"] == "labels"
    assert parked.job(job["id"])["spec"]["priority"] == "P1"  # nothing of it was applied
    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")
    frozen = parked.http.patch(f"/api/v1/jobs/{job['id']}", json={"priority": "p3"})
    assert frozen.status_code == 409 and "frozen" in frozen.json()["error"]["message"]


def test_heartbeat_and_pool_endpoints(parked: Rest) -> None:
    job = parked.submit()
    beat = parked.http.post(f"/api/v1/jobs/{job['id']}/heartbeat", json={"holder": "h:1"})
    assert beat.status_code == 200 and beat.json() == {"lease": None, "keep_running": True}
    nodes = parked.http.get("/api/v1/nodes").json()["nodes"]
    kinds = {"system", "memoryx", "swarmx", "worker"}
    assert len(nodes) == 12 and {n["kind"] for n in nodes} == kinds
    systems = parked.http.get("/api/v1/systems").json()["nodes"]
    assert [s["name"] for s in systems] == SYSTEMS
    assert {s["state"] for s in systems} == {"maintenance"}
    groups = {g["kind"]: g for g in parked.http.get("/api/v1/nodegroups").json()["nodegroups"]}
    assert groups["system"]["nodes"] == 4 and groups["system"]["usable"] == 0
    assert groups["memoryx"]["capacity"] == 4 * (16 << 30)
    assert (groups["worker"]["nodes"], groups["worker"]["capacity"]) == (2, 16)
    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
        "root": create_token(tokens_file, "root", [], admin=True),
    }
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    try:
        yield running, tokens
    finally:
        running.stop()


def test_tokens_decide_who_may_act(secured: tuple[RunningCoordinator, dict[str, str]]) -> None:
    running, tokens = secured
    base = f"https://127.0.0.1:{running.coordinator.http_port}"

    def as_(user: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {tokens[user]}"} if user else {}
        return httpx.Client(base_url=base, headers=headers, timeout=30)

    body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2}
    with as_(None) as nobody, as_("alice") as alice, as_("bob") as bob, as_("root") as root:
        denied = nobody.post("/api/v1/jobs", json=body)
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "unauthenticated"
        assert nobody.get("/api/v1/jobs").status_code == 401
        assert nobody.get("/healthz").status_code == 200

        job = alice.post("/api/v1/jobs", json=body).json()
        assert job["user"] == "alice"
        assert bob.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 403
        assert bob.patch(f"/api/v1/jobs/{job['id']}", json={"priority": "p1"}).status_code == 403
        assert alice.post("/api/v1/jobs", json=body | {"priority": "p0"}).status_code == 403
        assert bob.get(f"/api/v1/jobs/{job['id']}").status_code == 200
        cancelled = root.post(f"/api/v1/jobs/{job['id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["changed"]
