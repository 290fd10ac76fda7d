"""The backend contract (tests/integration/backends/contract.py) on Kubernetes: replica pods on
the real API server, run by the stand-in kubelet on this host with the local contract's
stand-in interpreter, through the chart's Role (role_kubeconfig), the backend built as the
coordinator builds it from its settings.

`adopt` answers for every replica pod of the namespace, so each test starts once no other
job's replica objects are left there, and ends with every object of the contract's job deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.backends.kubernetes import KubernetesBackend
from appliance.composition.backends import connect_kube, kube_backend
from appliance.config import Settings
from tests.integration.backends.contract import JOB_ID, BackendContract
from tests.integration.backends.test_local_backend import _fake_worker
from tests.integration.coordinator.harness import wait_until
from tests.integration.kubernetes.test_kubernetes_jobs import NETWORKING, job_objects_gone
from tests.kube.cluster import NAMESPACE, KubeCluster

# What the coordinator's replica objects carry (manifests.REPLICA_SELECTOR).
REPLICAS = "app.kubernetes.io/name=appliance,app.kubernetes.io/managed-by=appliance-coordinator"
# Long enough for the stand-in kubelet to see the deletion and SIGTERM the container.
DELETE_GRACE_SECONDS = 1


def replica_objects(kube: KubeCluster) -> list[str]:
    """The replica pods and job ConfigMaps of the namespace, as kind/name."""
    found = []
    for plural in ("pods", "configmaps"):
        response = kube.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/{plural}", params={"labelSelector": REPLICAS}
        )
        response.raise_for_status()
        found += [f"{plural}/{o['metadata']['name']}" for o in response.json()["items"]]
    return found


def delete_job_objects(kube: KubeCluster, job_id: str) -> None:
    """Delete every object of the job (pods with a grace the kubelet acts on)."""
    selector = {"labelSelector": f"{REPLICAS},appliance.io/job-id={job_id}"}
    body = {"gracePeriodSeconds": DELETE_GRACE_SECONDS}
    core, networking = f"/api/v1/namespaces/{NAMESPACE}", f"{NETWORKING}/namespaces/{NAMESPACE}"
    for path in (
        f"{core}/pods", f"{core}/services", f"{core}/secrets", f"{core}/configmaps",
        f"{networking}/networkpolicies",
    ):  # fmt: skip
        kube.request("DELETE", path, body, params=selector).raise_for_status()


class TestKubernetesBackendContract(BackendContract):
    """Finishing: the container's command is `sys.exit(0)`; running: it sleeps until SIGTERM."""

    survives_restart = True

    @pytest.fixture(autouse=True)
    def cluster(self, kube: KubeCluster, kube_settings: dict[str, object]) -> Iterator[None]:
        self.kube_settings = kube_settings
        wait_until(lambda: not replica_objects(kube), 30, "no replica objects in the namespace")
        yield  # then, passed or failed:
        delete_job_objects(kube, JOB_ID)
        wait_until(lambda: job_objects_gone(kube, JOB_ID), 30, "the job's objects to go")

    async def backend(self, tmp_path: Path, *, finishing: bool) -> KubernetesBackend:
        python = _fake_worker(tmp_path, "sys.exit(0)" if finishing else "time.sleep(600)")
        return await self._made(tmp_path, python)

    async def restarted(self, tmp_path: Path) -> KubernetesBackend:
        return await self._made(tmp_path, str(tmp_path / "fake-python"))

    async def _made(self, tmp_path: Path, python: str) -> KubernetesBackend:
        """The backend as the coordinator makes it, its pods running `python`."""
        values = {"data_dir": tmp_path / "data", **self.kube_settings}
        settings = Settings(**values)  # type: ignore[arg-type]
        backend = kube_backend(settings, await connect_kube(settings.kube))
        backend.coordinator_address = "127.0.0.1:1"  # as the coordinator sets it; none listens
        backend.template = dataclasses.replace(backend.template, python=python)
        return backend
