"""Submit, get, list, cancel and events over real HTTP, and the SSE stream to a terminal phase."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

from appliance.client import ApplianceClient
from tests.integration.rest.conftest import SMALL_PARAMS, Rest


def _sse(rest: Rest, job_id: str, **params: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every (event, data) of a job's stream; returns when the server ends the stream."""
    events = []
    with rest.http.stream(
        "GET", f"/api/v1/jobs/{job_id}/events/stream", params=params, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    return events


def test_a_job_runs_to_success_and_the_stream_ends_there(rest: Rest) -> None:
    submitted = rest.submit(num_steps=3, labels={"suite": "rest"})
    assert submitted["phase"] == "QUEUED"
    assert submitted["user"] == "anonymous"
    assert submitted["spec"]["params_yaml"] == SMALL_PARAMS
    assert submitted["spec"]["priority"] == "P2" and submitted["spec"]["mode"] == "train"

    events = _sse(rest, submitted["id"])  # returns only because the server ends the stream

    phases = [data["to_phase"] for kind, data in events if kind == "phase"]
    assert phases == ["QUEUED", "SCHEDULED", "INITIALIZING", "RUNNING", "SUCCEEDED"]
    seqs = [data["seq"] for kind, data in events if kind == "phase"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    final = rest.job(submitted["id"])
    assert final["phase"] == "SUCCEEDED"
    assert final["progress"]["step"] == 3
    assert {r["name"] for r in final["replicas"]} >= {"chief-0", "cs2-0"}
    assert all(r["exit_code"] == 0 for r in final["replicas"] if r["role"] == "chief")

    recorded = rest.http.get(f"/api/v1/jobs/{submitted['id']}/events").json()["events"]
    assert [e["to_phase"] for e in recorded] == phases
    # Resuming after the RUNNING event (SSE Last-Event-ID) replays only what came after it.
    resumed = _sse_with_header(rest, submitted["id"], seqs[3])
    assert [d["to_phase"] for k, d in resumed if k == "phase"] == ["SUCCEEDED"]


def _sse_with_header(rest: Rest, job_id: str, last_seq: int) -> list[tuple[str, dict[str, Any]]]:
    url = f"/api/v1/jobs/{job_id}/events/stream"
    with rest.http.stream("GET", url, headers={"Last-Event-ID": str(last_seq)}) as response:
        lines = [line for line in response.iter_lines() if line]
    kinds = [ln.removeprefix("event: ") for ln in lines if ln.startswith("event: ")]
    datas = [json.loads(ln.removeprefix("data: ")) for ln in lines if ln.startswith("data: ")]
    return list(zip(kinds, datas, strict=True))


def test_params_as_a_json_object_priority_and_mode(parked: Rest, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "checkpoint_1.npz").write_bytes(b"")  # an evaluation needs one
    job = parked.submit(
        params={"model": {"name": "fc_mnist", "hidden_sizes": [8]}, "optimizer": None},
        priority="p1",
        mode="eval",
        model_dir=str(model_dir),
        max_restarts=2,
    )
    got = parked.job(job["id"])
    assert (got["spec"]["max_restarts"], got["attempt"]) == (2, 0)  # queued: none begun
    assert got["spec"]["priority"] == "P1" and got["spec"]["mode"] == "eval"
    assert got["spec"]["model_dir"] == str(model_dir)
    assert "hidden_sizes" in got["spec"]["params_yaml"]
    assert got["pending_reason"] and got["queue_position"] >= 1


def test_submit_get_list_cancel_events_round_trip(parked: Rest) -> None:
    response = parked.http.post(
        "/api/v1/jobs",
        json={"params": SMALL_PARAMS, "num_csx": 2, "num_steps": 5, "labels": {"rt": "1"}},
    )
    assert response.status_code == 201
    job = response.json()
    assert response.headers["location"] == f"/api/v1/jobs/{job['id']}"

    got = parked.job(job["id"])
    assert got["id"] == job["id"] and got["spec"]["num_csx"] == 2
    assert got["spec"]["labels"] == {"rt": "1"}

    listed = parked.http.get("/api/v1/jobs", params={"label": "rt=1"}).json()
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert listed["jobs"][0]["spec"]["params_yaml"] == ""  # summaries leave the params out
    assert listed["next_page_token"] == ""

    cancel = parked.http.post(f"/api/v1/jobs/{job['id']}/cancel", json={"reason": "test over"})
    assert cancel.status_code == 200
    assert cancel.json()["changed"] is True
    assert cancel.json()["job"]["phase"] == "CANCELLED"
    assert cancel.json()["job"]["reason"] == "test over"
    again = parked.http.post(f"/api/v1/jobs/{job['id']}/cancel").json()
    assert again["changed"] is False and "already cancelled" in again["message"]

    events = parked.http.get(f"/api/v1/jobs/{job['id']}/events").json()["events"]
    assert [(e["from_phase"], e["to_phase"]) for e in events] == [
        (None, "QUEUED"),
        ("QUEUED", "CANCELLED"),
    ]
    assert events[1]["reason"] == "test over"
    # The stream of a finished job replays its events and ends.
    streamed = _sse_with_header(parked, job["id"], 0)
    assert [d["to_phase"] for _, d in streamed] == ["QUEUED", "CANCELLED"]
    assert parked.http.get("/api/v1/jobs", params={"label": "rt=1"}).json()["jobs"] == []
    everything = parked.http.get("/api/v1/jobs", params={"label": "rt=1", "all": True}).json()
    assert [j["phase"] for j in everything["jobs"]] == ["CANCELLED"]


def test_a_live_stream_ends_when_the_job_is_cancelled(parked: Rest) -> None:
    job = parked.submit()
    url = f"/api/v1/jobs/{job['id']}/events/stream"
    seen: list[str] = []
    with parked.http.stream("GET", url, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: "))["to_phase"])
                if seen == ["QUEUED"]:  # the recorded event arrived: now change the job live
                    parked.http.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert seen == ["QUEUED", "CANCELLED"]


def test_with_authentication_off_a_job_is_the_user_the_request_names(parked: Rest) -> None:
    """One rule for every door (README, "Whose job it is"): the gRPC client names the OS user,
    a REST body its `user`; a request naming none is anonymous's."""
    assert parked.submit(user="alice")["user"] == "alice"
    assert parked.submit()["user"] == "anonymous"
    with ApplianceClient(parked.running.address) as client:
        params = {"model": {"name": "fc_mnist", "hidden_sizes": [4]}}
        job = client.submit(params=params, num_csx=1, num_steps=2, detach=True)
        assert job.status.user == getpass.getuser()


def test_a_user_name_that_is_not_one_is_refused_naming_the_field(parked: Rest) -> None:
    response = parked.http.post(
        "/api/v1/jobs",
        json={"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2, "user": "a b\x1b"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "user"
