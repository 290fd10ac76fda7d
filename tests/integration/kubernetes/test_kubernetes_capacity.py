"""What the cluster's nodes can hold: the start-up warning when the pool's largest job cannot
fit them, with requests set per role (the stand-in kubelet's nodes have 64 CPU and 256 GiB
each, and its binder, like kube-scheduler, leaves a pod no node can hold unschedulable)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import serving, wait_until
from tests.integration.kubernetes.conftest import PARAMS
from tests.integration.kubernetes.test_kubernetes_jobs import job_objects_gone
from tests.kube.cluster import KubeCluster


def test_readyz_warns_when_the_pools_largest_job_cannot_fit_the_nodes(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    with serving(tmp_path / "fits", **kube_settings) as coordinator:
        readyz = httpx.get(f"https://127.0.0.1:{coordinator.coordinator.http_port}/readyz")
        assert readyz.json() == {"status": "ok", "reason": None, "warnings": []}

    too_big = {"cs2": {"cpu": "100", "memory": "1Gi"}}  # more CPU than any node has
    settings = {**kube_settings, "kube_replica_resources": too_big}
    with serving(tmp_path / "too-big", **settings) as coordinator:
        readyz = httpx.get(f"https://127.0.0.1:{coordinator.coordinator.http_port}/readyz")
        assert readyz.status_code == 200  # a warning: the coordinator still works
        (warning,) = readyz.json()["warnings"]
        assert "the pool's largest job (1 chief, 4 cs2, 4 memoryx, 1 swarmx, 4 worker" in warning
        assert "401.75 CPU" in warning and "schedulable node(s)" in warning
        assert "replicaResources" in warning


def test_pods_no_node_can_hold_fail_the_job_after_the_pending_timeout_with_the_reason(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    """As on a 2-CPU node: the chief runs and waits for CS-2 pods that stay unschedulable.
    It must wait across its 10 s windows (the pending timeout here is longer than one) until
    the backend fails the job with the scheduler's reason, not exit 1 after the first window."""
    settings = {
        **kube_settings,
        "kube_replica_resources": {"cs2": {"cpu": "100"}},
        "kube_pending_timeout_seconds": 14.0,
    }
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=2, num_steps=10)
        wait_until(lambda: job.status.phase is Phase.INITIALIZING, 30, "the pods to be made")
        started = time.monotonic()
        list(job.watch(timeout=120))
        final = job.status
        assert final.phase is Phase.FAILED, final.reason
        assert re.fullmatch(
            r"replica cs2-[01] failed: pod unschedulable: 0/\d+ nodes are available: "
            r"\d+ Insufficient cpu \(waited 1\d s\)",
            final.reason,
        ), final.reason
        assert time.monotonic() - started >= 13  # not before the pending timeout
        # The chief's first window ended "not yet", and it asked again.
        chief_log = "\n".join(line for _, line in client.logs(job.id, "chief-0"))
        assert "AwaitPeers: job " + job.id + " not running after 10 s" in chief_log, chief_log
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")
