"""What the cluster's nodes can hold: the start-up warning when the pool's largest job cannot
fit them, with requests set per role (the stand-in kubelet's nodes have 64 CPU and 256 GiB
each, and its binder, like kube-scheduler, leaves a pod no node can hold unschedulable)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.coordinator.harness import serving
from tests.kube.cluster import KubeCluster


def test_readyz_warns_when_the_pools_largest_job_cannot_fit_the_nodes(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    with serving(tmp_path / "fits", **kube_settings) as coordinator:
        readyz = httpx.get(f"http://127.0.0.1:{coordinator.coordinator.http_port}/readyz")
        assert readyz.json() == {"status": "ok", "reason": None, "warnings": []}

    too_big = {"cs2": {"cpu": "100", "memory": "1Gi"}}  # more CPU than any node has
    settings = {**kube_settings, "kube_replica_resources": too_big}
    with serving(tmp_path / "too-big", **settings) as coordinator:
        readyz = httpx.get(f"http://127.0.0.1:{coordinator.coordinator.http_port}/readyz")
        assert readyz.status_code == 200  # a warning: the coordinator still works
        (warning,) = readyz.json()["warnings"]
        assert "the pool's largest job (1 chief, 4 cs2, 4 memoryx, 1 swarmx" in warning
        assert "401.35 CPU" in warning and "schedulable node(s)" in warning
        assert "replicaResources" in warning
