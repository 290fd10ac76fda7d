"""`csctl get jobs` and `csctl get job` over the wire against the fake ClusterService."""

from __future__ import annotations

import dataclasses
import json
import time

import yaml
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.domain.job import Replica, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import Role

HOUR = 3600.0


def test_get_jobs_prints_the_csctl_table_newest_first(csctl: Csctl, cluster: FakeCluster) -> None:
    now = time.time()
    old = cluster.service.add_job(
        created_at=now - 3 * 24 * HOUR - 60,
        phase=Phase.RUNNING,
        systems=("cs2-0", "cs2-1"),
        labels={"team": "nlp", "model": "gpt3"},
    )
    new = cluster.service.add_job(created_at=now - 18 * HOUR - 60, user="bob")
    newest = cluster.service.add_job(created_at=now - 5 * 60 - 5)

    result = csctl("get", "jobs")

    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "NAME", "AGE", "DURATION", "PHASE", "TYPE", "PRIORITY", "CSX", "SYSTEMS", "USER",
        "LABELS",
    ]  # fmt: skip
    assert [row.split() for row in rows] == [
        [newest.id, "5m5s", "-", "QUEUED", "train", "P2", "1", "alice"],
        [new.id, "18h", "-", "QUEUED", "train", "P2", "1", "bob"],
        [old.id, "3d", "-", "RUNNING", "train", "P2", "1", "cs2-0,cs2-1", "alice",
         "model=gpt3,team=nlp"],
    ]  # fmt: skip
    assert rows[0].index("alice") == header.index("USER")


def test_get_jobs_hides_finished_jobs_unless_all(csctl: Csctl, cluster: FakeCluster) -> None:
    active = cluster.service.add_job(phase=Phase.RUNNING).id
    done = cluster.service.add_job(phase=Phase.SUCCEEDED).id

    active_only = csctl("get", "jobs")
    everything = csctl("get", "jobs", "-a")

    assert active in active_only.stdout and done not in active_only.stdout
    assert active in everything.stdout and done in everything.stdout


def test_label_selector_is_passed_to_the_server(csctl: Csctl, cluster: FakeCluster) -> None:
    wanted = cluster.service.add_job(labels={"team": "nlp", "model": "bert"}).id
    cluster.service.add_job(labels={"team": "cv"})

    result = csctl("get", "jobs", "-l", "team=nlp,model=bert", "--max-jobs", "5")

    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == [wanted]
    request = cluster.service.requests_of("ListJobs")[-1]
    assert isinstance(request, cluster_pb2.ListJobsRequest)
    assert request.label_selector == "team=nlp,model=bert"


def test_bad_label_selector_is_a_usage_error(csctl: Csctl) -> None:
    result = csctl("get", "jobs", "-l", "team=a=b")

    assert result.exit_code == 2
    assert "selector 'team=a=b': expected ',' between requirements, found '='" in result.stderr


def test_wide_adds_reason_queue_step_restarts_pending_and_start(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    cluster.service.add_job(
        pending_reason="needs 4 systems, 2 free", pending_reason_code="Capacity", queue_position=2
    )
    cluster.service.add_job(
        phase=Phase.CANCELLED, reason="cancelled by bob", reason_code="CancelledByAdmin"
    )

    result = csctl("get", "jobs", "-a", "-o", "wide")

    header, *rows = result.stdout.splitlines()
    assert header.split()[-6:] == ["REASON", "QUEUE", "STEP", "RESTARTS", "PENDING", "START(EST)"]
    queued = next(r for r in rows if "QUEUED" in r)
    cancelled = next(r for r in rows if "CANCELLED" in r)
    assert queued.split()[5:12] == ["P2", "1", "alice", "Capacity", "default", "0/10", "0"]
    assert queued.endswith("   #2: needs 4 systems, 2 free   -")
    assert cancelled.split()[7:9] == ["alice", "CancelledByAdmin"]


def test_json_and_yaml_lists_parse_back(csctl: Csctl, cluster: FakeCluster) -> None:
    ids = {cluster.service.add_job(labels={"team": "nlp"}).id for _ in range(3)}

    as_json = json.loads(csctl("get", "jobs", "-o", "json").stdout)
    as_yaml = yaml.safe_load(csctl("get", "jobs", "-o", "yaml").stdout)

    assert as_json == as_yaml
    assert {job["name"] for job in as_json} == ids
    assert as_json[0]["spec"]["labels"] == {"team": "nlp"}
    assert as_json[0]["phase"] == "QUEUED"


def test_get_job_shows_the_full_status_as_yaml(csctl: Csctl, cluster: FakeCluster) -> None:
    job = cluster.service.add_job(pending_reason="needs 1 system, 0 free", queue_position=1)

    result = csctl("get", "job", job.id, "-o", "yaml")

    assert result.exit_code == 0, result.output
    document = yaml.safe_load(result.stdout)
    assert document["name"] == job.id
    assert document["spec"]["params"] == {"model": {"name": "fc_mnist"}}
    assert (document["pending_reason"], document["queue_position"]) == (
        "needs 1 system, 0 free",
        1,
    )
    assert document["created_at"].endswith("Z")


def test_get_job_shows_a_short_summary_by_default(csctl: Csctl, cluster: FakeCluster) -> None:
    job = cluster.service.add_job(phase=Phase.RUNNING)

    shown = csctl("get", "job", job.id)

    assert shown.exit_code == 0, shown.output
    assert shown.stdout == csctl("get", "job", job.id, "-o", "table").stdout
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "AGE", "DURATION", "PHASE"] and len(lines) < 20
    assert "params" not in shown.stdout  # the whole document is -o yaml's


def test_get_job_as_json_and_table(csctl: Csctl, cluster: FakeCluster) -> None:
    job = cluster.service.add_job(phase=Phase.RUNNING)

    as_json = json.loads(csctl("get", "job", job.id, "-o", "json").stdout)
    as_table = csctl("get", "job", job.id, "-o", "table").stdout

    assert as_json["phase"] == "RUNNING"
    assert as_table.splitlines()[0].split()[:4] == ["NAME", "AGE", "DURATION", "PHASE"]


def test_unknown_job_is_one_error_line_and_exit_1(csctl: Csctl) -> None:
    result = csctl("get", "job", "wsjob-doesnotexist1")

    assert result.exit_code == 1
    assert result.stderr == "error: job wsjob-doesnotexist1 not found\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_get_job_shows_each_replicas_data_plane(csctl: Csctl, cluster: FakeCluster) -> None:
    said = "shared memory: swarmx-0, worker-0; grpc: none"
    job = cluster.service.add_job(phase=Phase.RUNNING)
    replicas = (
        Replica(job.id, "chief-0", Role.CHIEF, 0, "n", ReplicaPhase.READY, pid=7, data_plane=said),
        Replica(job.id, "cs2-0", Role.CS2, 0, "cs2-0", ReplicaPhase.READY, pid=8),
    )
    cluster.service.jobs[job.id] = dataclasses.replace(job, replicas=replicas)

    table = csctl("get", "job", job.id).stdout.splitlines()
    header = next(line for line in table if line.startswith("REPLICA"))
    chief = next(line for line in table if line.startswith("chief-0"))
    assert "DATA PLANE" in header and header.index("DATA PLANE") < header.index("MESSAGE")
    assert chief[header.index("DATA PLANE") :].rstrip() == said
    as_json = json.loads(csctl("get", "job", job.id, "-o", "json").stdout)
    assert [r["data_plane"] for r in as_json["replicas"]] == [said, ""]
    as_yaml = yaml.safe_load(csctl("get", "job", job.id, "-o", "yaml").stdout)
    assert as_yaml["replicas"][0]["data_plane"] == said
