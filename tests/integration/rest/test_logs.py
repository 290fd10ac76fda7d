"""GET /api/v1/jobs/{id}/logs against a real coordinator with real replica processes: the
lines csctl logs prints, one replica's, a tail, followed until the job ends; the gRPC logs'
authorization; bounded parameters refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.server.auth import create_token
from tests.integration.coordinator.harness import serving, wait_until
from tests.integration.rest.conftest import SMALL_PARAMS


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, dict[str, httpx.Client]]]:
    tokens_file = tmp_path / "tokens.yaml"
    users = {"alice": (["nlp"], False), "bob": (["cv"], False), "root": ([], True)}
    tokens = {u: create_token(tokens_file, u, g, admin=a) for u, (g, a) in users.items()}
    with serving(tmp_path / "data", auth_tokens_file=tokens_file) as running:
        base = f"https://127.0.0.1:{running.coordinator.http_port}"
        clients = {
            user: httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            for user, token in tokens.items()
        }
        clients["nobody"] = httpx.Client(base_url=base, timeout=60)
        try:
            yield running.address, clients
        finally:
            for client in clients.values():
                client.close()


def _run(alice: httpx.Client, num_steps: int) -> str:
    body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": num_steps}
    submitted = alice.post("/api/v1/jobs", json=body)
    assert submitted.status_code == 201, submitted.text
    job_id: str = submitted.json()["id"]
    return job_id


def _phase(client: httpx.Client, job_id: str) -> str:
    phase: str = client.get(f"/api/v1/jobs/{job_id}").json()["phase"]
    return phase


def test_logs_as_csctl_prints_them_with_the_grpc_authorization(
    secured: tuple[str, dict[str, httpx.Client]],
) -> None:
    _, clients = secured
    alice, bob, root, nobody = (clients[u] for u in ("alice", "bob", "root", "nobody"))
    job_id = _run(alice, 20)
    wait_until(lambda: _phase(alice, job_id) == "SUCCEEDED", 60, "the job to succeed")
    url = f"/api/v1/jobs/{job_id}/logs"

    everything = alice.get(url)
    assert everything.status_code == 200, everything.text
    assert everything.headers["content-type"].startswith("text/plain")
    lines = everything.text.splitlines()
    assert {line.split("]")[0] + "]" for line in lines} == {
        "[chief-0]", "[cs2-0]", "[memoryx-0]", "[swarmx-0]",
    }  # fmt: skip
    assert any("step 20/20" in line for line in lines)
    assert root.get(url).text == everything.text  # an admin may

    assert bob.get(url).status_code == 403  # not his, not his group's: as gRPC GetJobLogs
    assert nobody.get(url).status_code == 401

    chief = alice.get(url, params={"replica": "chief-0"}).text.splitlines()
    assert chief == [line.removeprefix("[chief-0] ") for line in lines if "[chief-0]" in line]
    tail = alice.get(url, params={"replica": "chief-0", "tail": 2})
    assert tail.text.splitlines() == chief[-2:]
    tails = alice.get(url, params={"tail": 1}).text.splitlines()
    assert len(tails) == 4 and f"[chief-0] {chief[-1]}" in tails


@pytest.mark.parametrize(
    ("params", "status", "field", "says"),
    [
        ({"replica": "cs2-9"}, 404, "replica", "has no replica 'cs2-9' (replicas: chief-0, cs2-0"),
        ({"replica": "../../etc/passwd"}, 422, "replica", ""),
        ({"replica": "x" * 65}, 422, "replica", ""),
        ({"tail": 0}, 422, "tail", ""),
        ({"tail": 10**9}, 422, "tail", ""),
        ({"tail": "ten"}, 422, "tail", ""),
        ({"follow": "maybe"}, 422, "follow", ""),
    ],
)
def test_bad_parameters_are_refused_naming_the_field(
    secured: tuple[str, dict[str, httpx.Client]],
    params: dict[str, object],
    status: int,
    field: str,
    says: str,
) -> None:
    _, clients = secured
    alice = clients["alice"]
    job_id = _run(alice, 2)
    wait_until(lambda: _phase(alice, job_id) == "SUCCEEDED", 60, "the job to succeed")

    refused = alice.get(f"/api/v1/jobs/{job_id}/logs", params=params)  # type: ignore[arg-type]

    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and says in error["message"]
    assert "\n" not in error["message"]


def test_unknown_and_malformed_jobs(secured: tuple[str, dict[str, httpx.Client]]) -> None:
    alice = secured[1]["alice"]
    assert alice.get("/api/v1/jobs/wsjob-000000000000/logs").status_code == 404
    malformed = alice.get("/api/v1/jobs/not-a-job/logs")
    assert malformed.status_code == 422 and malformed.json()["error"]["field"] == "job_id"


def test_follow_streams_lines_while_the_job_runs_and_ends_with_it(
    secured: tuple[str, dict[str, httpx.Client]],
) -> None:
    alice = secured[1]["alice"]
    job_id = _run(alice, 400)
    wait_until(lambda: _phase(alice, job_id) == "RUNNING", 60, "the job to run")

    seen: list[str] = []
    phase_at_first_line = ""
    url = f"/api/v1/jobs/{job_id}/logs"
    with alice.stream("GET", url, params={"follow": True, "replica": "chief-0"}) as streamed:
        assert streamed.status_code == 200
        for line in streamed.iter_lines():
            if not seen:
                phase_at_first_line = _phase(alice, job_id)
            seen.append(line)
    assert phase_at_first_line == "RUNNING"  # streamed, not sent when the job ended
    assert _phase(alice, job_id) == "SUCCEEDED"  # the stream ended because the job did
    assert any("step 400/400" in line for line in seen)
