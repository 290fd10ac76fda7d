"""Your own data on a real node (#33): the chart's `dataSets` mounted into input workers only.

A release of its own (namespace appliance-data, Pod Security "restricted") whose shared data
sets are a directory on the node's host, given to the chart as `dataSets.path` with
`dataSets.existingClaim` (a hostPath PersistentVolume bound to that claim: what a restricted
namespace admits). The digits are written there as MNIST files. A job through the
port-forwarded door reads them with its input workers and succeeds; only the workers' pods
mount the directory, read-only (a write in it fails with EROFS), no other replica nor the
coordinator; a corrupt file fails its job naming it (the worker's last error line is its pod's
termination message); a worker killed by the runtime restarts its job, which resumes bit for
bit; a deleted coordinator's successor adopts a running job, its workers with it. Last,
`dataSets.path` alone (a hostPath volume): the restricted namespace refuses the worker's pod
and the job fails saying so; a privileged one runs it, mounted read-only. Its own volumes
(data sets, model dirs, the store) leave the node's pool of volumes to the other modules.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.client import ApplianceClient
from appliance.client.errors import JobFailed
from appliance.domain.phases import Phase
from tests.data_sets import write_digits
from tests.integration.coordinator.same_run import assert_same_run
from tests.kube.cluster import RESTRICTED
from tests.kube.node import RealNode, wait_for
from tests.node.conftest import (
    admin_token,
    coordinator_pod,
    install,
    replace_coordinator,
    uninstall,
)
from tests.node.test_chart_on_node import _exec, _job_pods
from tests.node.test_sizes_on_node import README_2CPU

NAMESPACE = "appliance-data"
CLAIM = "data-sets"
MODEL_DIRS = "model-dirs"
STORE = "store"
STEPS = 400
# ~65 steps/s for a 2-CS-2 job with its 2 input workers on CI's node (7 containers on 2 CPUs),
# and its progress lags by a moment: long enough that the kill lands mid-run (a worker that
# dies once the chief has all its batches does not fail the job), ~15 s.
KILL_STEPS = 1000
# Long enough to outlive a coordinator's replacement (~15 s): ~38 s.
ADOPT_STEPS = 2500


def _params(train: Path, evaluation: Path) -> dict[str, Any]:
    """fc_mnist on the 8x8 digits: a small model that learns them in a few hundred steps."""
    return {
        "model": {"name": "fc_mnist", "input_size": 64, "hidden_sizes": [32], "num_classes": 10},
        "train_input": {"batch_size": 64, "data_dir": str(train), "shuffle_seed": 3},
        "eval_input": {"batch_size": 64, "data_dir": str(evaluation), "drop_last_batch": False},
        "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05, "momentum": 0.9},
        "runconfig": {"checkpoint_steps": 100, "log_steps": 10, "seed": 5},
    }


class DataRelease:
    def __init__(self, root: Path, token: str, model_dirs: Path) -> None:
        self.root = root  # the data sets' directory on the node's host (and in the workers)
        self.token = token
        self.model_dirs = model_dirs  # the model dirs' volume on the node's host

    def model_dir(self, job_id: str) -> Path:
        (found,) = self.model_dirs.glob(f"users/*/{job_id}")
        return found


@pytest.fixture(scope="module")
def data_release(node: RealNode) -> Iterator[DataRelease]:
    base = Path(tempfile.mkdtemp(prefix="appliance-node-data-", dir="/var/tmp"))
    base.chmod(0o755)  # the replicas run as uid 10001
    root, model_dirs = base / "sets", base / "model_dirs"
    write_digits(root / "digits")
    write_digits(root / "corrupt")
    images = root / "corrupt" / "train" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-1000])  # truncated, as a half-copied file is
    for writable in (model_dirs, base / "store"):
        writable.mkdir()
        writable.chmod(0o1777)  # a hostPath volume: fsGroup does not apply (README)
    node.kubectl("create", "namespace", NAMESPACE, check=False)
    labels = [f"{key}={value}" for key, value in RESTRICTED.items()]
    node.kubectl("label", "--overwrite", "namespace", NAMESPACE, *labels)
    # The admin's storage: the host's directories as volumes only these claims bind (none of
    # the node's pool of volumes, which other modules' releases use).
    _apply(node, _volume_and_claim(CLAIM, root, "ReadOnlyMany"))
    _apply(node, _volume_and_claim(MODEL_DIRS, model_dirs, "ReadWriteOnce"))
    _apply(node, _volume_and_claim(STORE, base / "store", "ReadWriteOnce"))
    try:
        install(
            node, NAMESPACE, "--set", f"dataSets.path={root}", "--set",
            f"dataSets.existingClaim={CLAIM}", "--set", f"persistence.existingClaim={STORE}",
            "--set", "modelDirs.persistence.enabled=true",
            "--set", f"modelDirs.persistence.existingClaim={MODEL_DIRS}",
            "--set-json", f"replicaResources={README_2CPU}",
        )  # fmt: skip
        yield DataRelease(root, admin_token(node, NAMESPACE), model_dirs)
    finally:
        uninstall(node, NAMESPACE)
        for claim in (CLAIM, MODEL_DIRS, STORE):
            node.kubectl("delete", "pv", f"{NAMESPACE}-{claim}", "--wait=false", check=False)
        shutil.rmtree(base, ignore_errors=True)


def _volume_and_claim(claim: str, path: Path, mode: str) -> str:
    """A hostPath PersistentVolume bound to exactly this claim, and the claim."""
    return f"""
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {NAMESPACE}-{claim}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [{mode}]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {{namespace: {NAMESPACE}, name: {claim}}}
  hostPath: {{path: "{path}", type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: {NAMESPACE}}}
spec:
  accessModes: [{mode}]
  storageClassName: ""
  volumeName: {NAMESPACE}-{claim}
  resources: {{requests: {{storage: 1Gi}}}}
"""


def _apply(node: RealNode, manifest: str) -> None:
    done = subprocess.run(
        [node.env["KUBECTL"], "apply", "-f", "-"], input=manifest, env=node.process_env(),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _running(node: RealNode, job_id: str, count: int) -> list[dict[str, Any]] | None:
    """The job's pods when `count` of them all run their container, else None."""
    pods: list[dict[str, Any]] = []
    for pod in _job_pods(node, NAMESPACE, job_id):
        statuses: list[dict[str, Any]] = pod["status"].get("containerStatuses", [])  # type: ignore[attr-defined]
        if any("running" in s.get("state", {}) for s in statuses):
            pods.append(pod)
    return pods if len(pods) == count else None


def _replica_count(client: ApplianceClient, job_id: str) -> int:
    return len(wait_for(lambda: client.get_job(job_id).replicas, "the job's replicas"))


def _data_sets_mounts(pod: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """The pod's mounts and volumes of the data sets: by name, or at their path."""
    (container,) = pod["spec"]["containers"]
    mounts = [
        m
        for m in container.get("volumeMounts", [])
        if m["name"] == CLAIM or m["mountPath"] == str(root)
    ]
    volumes = [v for v in pod["spec"].get("volumes", []) if v["name"] == CLAIM]
    return mounts + volumes


def test_a_job_on_a_shared_data_set_reads_it_through_its_input_workers_only(
    node: RealNode, data_release: DataRelease
) -> None:
    root = data_release.root
    train, evaluation = root / "digits" / "train", root / "digits" / "val"
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        job = client.submit(
            params=_params(train, evaluation), num_csx=2, num_steps=STEPS, mode="train_and_eval"
        )
        count = _replica_count(client, job.id)
        pods = wait_for(lambda: _running(node, job.id, count), f"{count} running pods")
        # While it runs: the workers read the directory and cannot write into it.
        roles = {p["metadata"]["labels"]["appliance.io/replica"]: p for p in pods}
        workers = sorted(name for name in roles if name.startswith("worker-"))
        assert workers == ["worker-0", "worker-1"], sorted(roles)
        worker_pod = roles["worker-0"]["metadata"]["name"]
        listed = _exec(node, NAMESPACE, worker_pod, "ls", str(train))
        assert "train-images-idx3-ubyte" in listed.stdout, listed.stderr
        probe = f"open({str(train / 'probe')!r}, 'w')"
        write = _exec(node, NAMESPACE, worker_pod, "python3", "-c", probe)
        assert "OSError: [Errno 30] Read-only file system" in write.stderr, write.stderr
        chief_pod = roles["chief-0"]["metadata"]["name"]
        seen = _exec(
            node,
            NAMESPACE,
            chief_pod,
            "python3",
            "-c",
            f"import os; print(os.path.exists({str(root)!r}))",
        )
        assert seen.stdout.strip() == "False", seen
        done = job.wait(timeout=300)
    assert done.phase == Phase.SUCCEEDED, done.reason
    progress = done.progress
    print(f"digits on the node: step {progress.step}, eval accuracy "
          f"{progress.eval_accuracy} over {progress.eval_samples} samples")  # fmt: skip
    assert progress.step == STEPS and progress.eval_samples == 359
    assert progress.eval_accuracy is not None and progress.eval_accuracy >= 0.9
    # The pod specs: the workers mount the claim read-only at the data sets' path; no other
    # replica of the job, nor the coordinator, has it.
    for name, pod in roles.items():
        found = _data_sets_mounts(pod, root)
        if name in workers:
            mount = {"name": CLAIM, "mountPath": str(root), "readOnly": True}
            volume = {
                "name": CLAIM,
                "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True},
            }
            assert found == [mount, volume], (name, found)
        else:
            assert found == [], (name, found)
    assert _data_sets_mounts(coordinator_pod(node, NAMESPACE), root) == []
    assert not (train / "probe").exists()


def test_a_corrupt_file_on_the_shared_data_sets_fails_its_job_naming_it(
    node: RealNode, data_release: DataRelease
) -> None:
    corrupt = data_release.root / "corrupt"
    images = corrupt / "train" / "train-images-idx3-ubyte"
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        job = client.submit(
            params=_params(corrupt / "train", corrupt / "val"), num_csx=1, num_steps=20
        )
        with pytest.raises(JobFailed) as failed:
            job.wait(timeout=300)
    reason = failed.value.job.reason
    assert reason.startswith("replica worker-0 exited with exit code 1: DataError: "), reason
    assert f"{images} is truncated" in reason, reason


def test_an_input_worker_killed_by_the_runtime_restarts_its_job_which_resumes_exactly(
    node: RealNode, data_release: DataRelease
) -> None:
    root = data_release.root
    params = _params(root / "digits" / "train", root / "digits" / "val")
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        reference = client.submit(params=params, num_csx=2, num_steps=KILL_STEPS)
        assert reference.wait(timeout=300).phase == Phase.SUCCEEDED
        job = client.submit(params=params, num_csx=2, num_steps=KILL_STEPS, max_restarts=1)
        wait_for(lambda: client.get_job(job.id).progress.step >= 110, "a checkpoint", 300)
        node.kill_container(NAMESPACE, f"{job.id}-a1-worker-1")
        done = job.wait(timeout=300)
        assert done.phase == Phase.SUCCEEDED, done.reason
        full = client.get_job(job.id)
    assert full.restarts == 1
    first, second = full.attempts
    assert "worker-1" in first.reason and "137" in first.reason, first.reason
    assert second.resumed_from >= 100, second.resumed_from
    assert_same_run(
        data_release.model_dir(job.id), data_release.model_dir(reference.id), KILL_STEPS
    )


def test_a_new_coordinator_adopts_a_running_job_with_its_input_workers(
    node: RealNode, data_release: DataRelease
) -> None:
    root = data_release.root
    params = _params(root / "digits" / "train", root / "digits" / "val")
    old = coordinator_pod(node, NAMESPACE)["metadata"]["name"]  # type: ignore[index]
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        job = client.submit(params=params, num_csx=2, num_steps=ADOPT_STEPS, detach=True)
        count = _replica_count(client, job.id)
        wait_for(lambda: _running(node, job.id, count), f"{count} running pods")
    new = replace_coordinator(node, NAMESPACE, old)
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        done = client.job(job.id).wait(timeout=300)
        assert done.phase == Phase.SUCCEEDED, done.reason
        assert client.get_job(job.id).restarts == 0
    log = node.kubectl("-n", NAMESPACE, "logs", new)
    assert f"adopted {job.id} ({count} replicas)" in log, log
    assert count == 7  # chief, 2 CS-2s, MemoryX, SwarmX and the 2 input workers


def test_the_nodes_own_directory_is_refused_by_restricted_and_mounted_read_only_elsewhere(
    node: RealNode, data_release: DataRelease
) -> None:
    """`dataSets.path` alone: a hostPath volume. The restricted namespace refuses the worker's
    pod and the job fails saying so; where the admin allows hostPath it runs, read-only."""
    root = data_release.root
    params = _params(root / "digits" / "train", root / "digits" / "val")
    install(node, NAMESPACE, "--reuse-values", "--set", "dataSets.existingClaim=")
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (grpc_port,),
        ApplianceClient(f"127.0.0.1:{grpc_port}", token=data_release.token) as client,
    ):
        refused = client.submit(params=params, num_csx=1, num_steps=50)
        with pytest.raises(JobFailed) as failed:
            refused.wait(timeout=300)
        reason = failed.value.job.reason
        assert "worker-0" in reason and 'PodSecurity "restricted' in reason, reason
        assert 'volume "data-sets" uses restricted volume type "hostPath"' in reason, reason

        privileged = "pod-security.kubernetes.io/enforce=privileged"
        node.kubectl("label", "--overwrite", "namespace", NAMESPACE, privileged)
        job = client.submit(params=params, num_csx=1, num_steps=KILL_STEPS)
        pods = wait_for(lambda: _running(node, job.id, _replica_count(client, job.id)), "pods")
        roles = {p["metadata"]["labels"]["appliance.io/replica"]: p for p in pods}
        worker_pod = roles["worker-0"]["metadata"]["name"]
        probe = f"open({str(root / 'digits' / 'probe')!r}, 'w')"
        write = _exec(node, NAMESPACE, worker_pod, "python3", "-c", probe)
        assert "OSError: [Errno 30] Read-only file system" in write.stderr, write.stderr
        done = job.wait(timeout=300)
    assert done.phase == Phase.SUCCEEDED, done.reason
    mount = {"name": CLAIM, "mountPath": str(root), "readOnly": True}
    volume = {"name": CLAIM, "hostPath": {"path": str(root), "type": "Directory"}}
    for name, pod in roles.items():
        found = _data_sets_mounts(pod, root)
        assert found == ([mount, volume] if name == "worker-0" else []), (name, found)
    assert _data_sets_mounts(coordinator_pod(node, NAMESPACE), root) == []
