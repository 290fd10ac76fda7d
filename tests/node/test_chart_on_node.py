"""The chart and image on a real node, as the README's kind section uses them.

Everything here is real: the coordinator pod runs the image under containerd with the chart's
security context, talks to the API server with its ServiceAccount token, keeps its store on
a PersistentVolume; replicas are containers reaching the coordinator over Service DNS and each
other on pod IPs; csctl and the client come in through `kubectl port-forward`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from appliance.client import ApplianceClient
from appliance.client.errors import JobFailed
from appliance.domain.phases import Phase
from tests.kube.cluster import REPO
from tests.kube.node import RealNode, wait_for
from tests.node.conftest import coordinator_pod, replace_coordinator

PARAMS = REPO / "examples" / "params_fc_mnist.yaml"
# ~30 steps/s for a 2-CS-2 job of PARAMS on CI's node: ~13 s, several times the few seconds
# from its containers running to a kill, and what a restarted attempt runs again from step 0.
KILLED_STEPS = 400
# ~35 s: long enough to outlive the coordinator's replacement (~15 s), adopted mid-run.
ADOPTED_STEPS = 1000
CSCTL = Path(sys.executable).parent / "csctl"


def _exec(
    node: RealNode, namespace: str, pod: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node.env["KUBECTL"], "-n", namespace, "exec", pod, "--", *argv],
        env=node.process_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _csctl(port: int, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CSCTL), "--server", f"127.0.0.1:{port}", *args],
        env={**os.environ, "CSCTL_TOKEN": token}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def _job_pods(node: RealNode, namespace: str, job_id: str) -> list[dict[str, object]]:
    return list(
        node.kubectl_json("-n", namespace, "get", "pods", "-l", f"appliance.io/job-id={job_id}")[
            "items"
        ]
    )


def _all_running(node: RealNode, namespace: str, job_id: str, count: int) -> list[str] | None:
    """The container ids when `count` pods of the job all run a container, else None."""
    ids = []
    for pod in _job_pods(node, namespace, job_id):
        for status in pod["status"].get("containerStatuses", []):  # type: ignore[attr-defined]
            if "running" in status.get("state", {}):
                ids.append(status["containerID"])
    return ids if len(ids) == count else None


def test_coordinator_pod_is_ready_non_root_read_only_with_its_store_on_the_volume(
    node: RealNode, namespace: str, release: str
) -> None:
    pod = coordinator_pod(node, namespace)
    name = pod["metadata"]["name"]  # type: ignore[index]
    assert _exec(node, namespace, name, "id", "-u").stdout.strip() != "0"
    write = _exec(node, namespace, name, "python3", "-c", "open('/probe', 'w')")
    assert "Read-only file system" in write.stderr
    # The runtime applies the RuntimeDefault seccomp profile (2: filter mode).
    status = _exec(node, namespace, name, "grep", "^Seccomp:", "/proc/1/status").stdout
    assert status.split() == ["Seccomp:", "2"]
    claim = node.kubectl_json("-n", namespace, "get", "pvc", "appliance-data")
    assert claim["status"]["phase"] == "Bound"
    volume = node.kubectl_json("get", "pv", claim["spec"]["volumeName"])
    assert (Path(volume["spec"]["hostPath"]["path"]) / "appliance.db").is_file()
    # What it prints for a user to try names the way in, not the address it binds.
    log = node.kubectl("-n", namespace, "logs", name)
    assert "kubectl port-forward" in log and "--server 0.0.0.0" not in log, log


def test_a_job_from_this_machine_runs_as_real_containers_and_succeeds(
    node: RealNode, namespace: str, release: str
) -> None:
    with node.port_forward(namespace, "svc/appliance", 50051, 8080) as (grpc_port, http_port):
        listed = _csctl(grpc_port, release, "get", "jobs", "-a")
        assert listed.returncode == 0, listed.stderr
        ready = httpx.get(f"https://127.0.0.1:{http_port}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        with ApplianceClient(f"127.0.0.1:{grpc_port}", token=release) as client:
            job = client.submit(params=str(PARAMS), num_csx=2, num_steps=400)
            # chief, 2 CS-2, MemoryX, SwarmX: five containers of the runtime, all running.
            containers = wait_for(
                lambda: _all_running(node, namespace, job.id, 5), "5 running containers"
            )
            assert all(c.startswith("containerd://") for c in containers)
            done = job.wait(timeout=300)
            assert done.phase == Phase.SUCCEEDED, done.reason
        # Its checkpoints are on the model dirs' volume, where the chart puts it.
        claim = node.kubectl_json("-n", namespace, "get", "pvc", "appliance-model-dirs")
        volume = node.kubectl_json("get", "pv", claim["spec"]["volumeName"])
        root = Path(volume["spec"]["hostPath"]["path"])
        assert list(root.glob(f"users/*/{job.id}/checkpoint_*.npz")), list(root.rglob("*"))
        logs = _csctl(grpc_port, release, "logs", job.id, "--replica", "chief-0")
        assert logs.returncode == 0, logs.stderr
        assert "finished (exit 0)" in logs.stdout


def test_a_pipelined_job_runs_as_two_containers_chief_and_cs2(
    node: RealNode, namespace: str, release: str
) -> None:
    params = yaml.safe_load(PARAMS.read_text())
    params["runconfig"] = {**params.get("runconfig", {}), "execution_strategy": "pipeline"}
    with (
        node.port_forward(namespace, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=release) as client,
    ):
        job = client.submit(params=params, num_csx=1, num_steps=1500, detach=True)
        # The whole model on one CS-2: no MemoryX, no SwarmX pod.
        wait_for(lambda: _all_running(node, namespace, job.id, 2), "2 running containers")
        names = sorted(
            p["metadata"]["labels"]["appliance.io/replica"]  # type: ignore[index]
            for p in _job_pods(node, namespace, job.id)
        )
        assert names == ["chief-0", "cs2-0"], names
        done = job.wait(timeout=300)
        assert done.phase == Phase.SUCCEEDED, done.reason
        assert sorted(r.name for r in done.replicas) == ["chief-0", "cs2-0"]


@pytest.mark.parametrize("max_restarts", [0, 1])
def test_a_replica_killed_by_the_runtime_fails_or_restarts_its_job(
    node: RealNode, namespace: str, release: str, max_restarts: int
) -> None:
    with (
        node.port_forward(namespace, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=release) as client,
    ):
        job = client.submit(
            params=str(PARAMS), num_csx=2, num_steps=KILLED_STEPS, max_restarts=max_restarts
        )
        wait_for(lambda: _all_running(node, namespace, job.id, 5), "5 running containers")
        pod = next(
            p["metadata"]["name"]  # type: ignore[index]
            for p in _job_pods(node, namespace, job.id)
            if p["metadata"]["name"].endswith("-cs2-0")  # type: ignore[index]
        )
        # The runtime applies the RuntimeDefault seccomp profile to replicas too.
        seccomp = _exec(node, namespace, pod, "grep", "^Seccomp:", "/proc/1/status").stdout
        assert seccomp.split() == ["Seccomp:", "2"]
        node.kill_container(namespace, pod)
        if max_restarts == 0:
            with pytest.raises(JobFailed) as failed:
                job.wait(timeout=300)
            reason = failed.value.job.reason
            assert "cs2-0" in reason and "exit code 137" in reason, reason
        else:
            done = job.wait(timeout=300)
            assert done.phase == Phase.SUCCEEDED, done.reason
            full = client.get_job(job.id)
            assert full.restarts == 1
            first = full.attempts[0].reason
            assert "cs2-0" in first and "137" in first, first


def test_a_deleted_coordinator_pod_is_replaced_and_adopts_the_running_job(
    node: RealNode, namespace: str, release: str
) -> None:
    old = coordinator_pod(node, namespace)["metadata"]["name"]  # type: ignore[index]
    with (
        node.port_forward(namespace, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=release) as client,
    ):
        before = {j.id for j in client.list_jobs(all=True)}
        job = client.submit(params=str(PARAMS), num_csx=2, num_steps=ADOPTED_STEPS, detach=True)
        wait_for(lambda: _all_running(node, namespace, job.id, 5), "5 running containers")
    new = replace_coordinator(node, namespace, old)
    # The port-forward died with the old pod (the README says so): a new one reaches the new.
    with (
        node.port_forward(namespace, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=release) as client,
    ):
        done = client.job(job.id).wait(timeout=300)
        assert done.phase == Phase.SUCCEEDED, done.reason
        # The job history is on the volume: every job from before is still there.
        assert before | {job.id} <= {j.id for j in client.list_jobs(all=True)}
    log = node.kubectl("-n", namespace, "logs", new)
    assert f"adopted {job.id} (5 replicas)" in log
