"""The Kubernetes backend when things go wrong: expired watches, restarts, RBAC, bad images,
an API server that goes away."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.backends.kubernetes import KubeApi, KubeError, KubernetesBackend
from appliance.client import ApplianceClient, JobHandle
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    serving,
    wait_until,
    worker_processes,
)
from tests.integration.kubernetes.conftest import PARAMS
from tests.integration.kubernetes.test_kubernetes_jobs import job_objects_gone, pods_of
from tests.kube.cluster import NAMESPACE, KubeCluster


def _backend(coordinator: RunningCoordinator) -> KubernetesBackend:
    backend = coordinator.coordinator.backend
    assert isinstance(backend, KubernetesBackend)
    return backend


def _kill(job_id: str, replica: str) -> None:
    (victim,) = [p for p in worker_processes(job_id) if replica in p.cmdline()]
    os.killpg(victim.pid, signal.SIGKILL)


def test_restarted_coordinator_adopts_pods_and_the_job_completes(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir, **kube_settings).start()
    port = first.coordinator.grpc_port
    try:
        with ApplianceClient(first.address) as client:
            job = client.submit(params=PARAMS, num_csx=2, num_steps=400)
            wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        names = sorted(p["metadata"]["name"] for p in pods_of(kube, job.id))
    finally:
        first.stop()
    with (
        serving(data_dir, **{**kube_settings, "grpc_port": port}) as second,
        ApplianceClient(second.address) as client,
    ):
        handle = client.job(job.id)
        list(handle.watch(timeout=120))
        final = handle.status
        assert final.phase is Phase.SUCCEEDED, final.reason
        assert final.progress.step == 400
        events = [e.reason for e in client.events(job.id)]
        assert not any("restart" in r for r in events), events
        assert len(names) == 5
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


def test_a_deleted_pod_is_a_retryable_failure_and_the_next_attempt_gets_new_pods(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    """A pod taken from its job (deleted here; evicted or lost with its node alike) restarts
    the job when its policy allows, as a killed replica does on the local backend."""
    settings = {**kube_settings, "restart_backoff_seconds": 0.0}
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=1, num_steps=100_000, max_restarts=1)
        wait_until(lambda: job.status.progress.step >= 20, 90, "the job to train")
        (pod,) = [p for p in pods_of(kube, job.id) if p["metadata"]["labels"][
            "appliance.io/replica"] == "cs2-0"]  # fmt: skip
        assert pod["metadata"]["labels"]["appliance.io/attempt"] == "1"
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}"
        kube.request("DELETE", path, json={"gracePeriodSeconds": 0}).raise_for_status()
        wait_until(lambda: (job.status.attempt == 2 and job.status.phase is Phase.RUNNING)
                   or job.status.phase.terminal, 90, "the second attempt to run")  # fmt: skip
        status = job.status
        assert (status.attempt, status.phase) == (2, Phase.RUNNING), (status.reason, [
            e.reason for e in job.events()])  # fmt: skip
        attempts = {p["metadata"]["labels"]["appliance.io/attempt"] for p in pods_of(kube, job.id)}
        assert attempts == {"2"}
        job.cancel()
        final = job.status
        assert final.attempts[0].ended_in is Phase.QUEUED
        assert "replica cs2-0" in final.attempts[0].reason
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


def test_the_chart_role_cannot_list_pods_in_another_namespace(role_kubeconfig: Path) -> None:
    async def probe() -> tuple[int, int]:
        api = await KubeApi.connect(kubeconfig=role_kubeconfig, namespace="", request_timeout=5)
        try:
            own, _ = await api.list("Pod", "app.kubernetes.io/name=appliance")
            with pytest.raises(KubeError) as refused:
                await api.list("Pod", "", namespace="default")
            return len(own) >= 0, refused.value.status
        finally:
            await api.close()

    assert asyncio.run(probe()) == (True, 403)


def test_image_that_cannot_be_pulled_fails_the_job_with_the_reason(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    settings = {
        **kube_settings,
        "kube_image": "appliance:no-such-tag",
        "kube_pending_timeout_seconds": 2.0,
    }
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=1, num_steps=10)
        list(job.watch(timeout=60))
        final = job.status
        assert final.phase is Phase.FAILED
        assert "never started: ErrImagePull" in final.reason, final.reason
        assert "appliance:no-such-tag" in final.reason
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


class _Proxy:
    """A TCP relay to the API server that the test can cut and restore: an outage."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        self.up.clear()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.conns.clear()

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def proxy(kube: KubeCluster) -> Iterator[_Proxy]:
    relay = _Proxy(kube.port)
    yield relay
    relay.close()


def _relayed(
    tmp_path: Path, kube: KubeCluster, settings: dict[str, object], proxy: _Proxy
) -> Path:
    """A copy of the coordinator's kubeconfig that goes through the relay."""
    relayed = tmp_path / "relayed.kubeconfig"
    text = Path(str(settings["kube_config"])).read_text()
    relayed.write_text(text.replace(f":{kube.port}", f":{proxy.port}"))
    return relayed


def _pod_ended(kube: KubeCluster, job_id: str, replica: str) -> bool:
    pod = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{job_id}-a1-{replica}").json()
    return any(
        "terminated" in (c.get("state") or {})
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def test_transition_while_the_watch_is_broken_is_found_by_the_next_list(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object], proxy: _Proxy
) -> None:
    settings = {**kube_settings, "kube_config": _relayed(tmp_path, kube, kube_settings, proxy)}
    with _running_job(tmp_path, kube, settings) as (backend, job):
        errors = backend.watch_restarts["error"]
        proxy.cut()  # the watch breaks; nothing reaches the coordinator
        wait_until(lambda: backend.watch_restarts["error"] > errors, 30, "the watch to break")
        _kill(job.id, "cs2-1")
        wait_until(lambda: _pod_ended(kube, job.id, "cs2-1"), 30, "the kubelet to report it")
        assert job.status.phase is Phase.RUNNING  # nobody has seen it yet
        proxy.restore()
        list(job.watch(timeout=60))
        final = job.status
        assert final.phase is Phase.FAILED
        assert final.reason.startswith("replica cs2-1 exited with exit code 137"), final.reason


@contextlib.contextmanager
def _running_job(
    tmp_path: Path, kube: KubeCluster, settings: dict[str, object]
) -> Iterator[tuple[KubernetesBackend, JobHandle]]:
    """A coordinator with a long 2-CS-2 job RUNNING; at the end its objects must be gone."""
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=2, num_steps=100_000)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        yield _backend(coordinator), job
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


def _watch_expired(kube: KubeCluster, version: str) -> bool:
    """Whether a pod watch from `version` now gets "410 Gone" (the watch cache is ready)."""
    response = kube.request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        params={"watch": "true", "resourceVersion": version, "timeoutSeconds": "1"},
    )
    return '"code":410' in response.text


def test_expired_watch_is_listed_again_and_misses_no_transition(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object], proxy: _Proxy
) -> None:
    settings = {**kube_settings, "kube_config": _relayed(tmp_path, kube, kube_settings, proxy)}
    with _running_job(tmp_path, kube, settings) as (backend, job):
        version = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()
        before = backend.watch_restarts["gone"]
        # The coordinator loses the API server; meanwhile the chief dies and the API server
        # restarts with an empty watch cache. When the coordinator is back, its watch resumes
        # from the resourceVersion it last saw, gets a real "410 Gone", and must list again:
        # only that list can show the chief's end. (The other replicas outlive the chief by
        # their step timeout, so its end is the one transition to find.)
        proxy.cut()
        _kill(job.id, "chief-0")
        # A write after the coordinator's last view, so the new cache starts past it.
        bump = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"bump-{job.id}"}}
        kube.apply(bump, NAMESPACE)
        kube.restart_apiserver()
        old = version["metadata"]["resourceVersion"]
        wait_until(lambda: _watch_expired(kube, old), 60, "the API server to expire old versions")
        proxy.restore()
        list(job.watch(timeout=60))
        final = job.status
        assert final.phase is Phase.FAILED
        assert final.reason.startswith("replica chief-0 exited with exit code 137"), final.reason
        assert backend.watch_restarts["gone"] > before


def test_api_server_outage_is_a_condition_and_readyz_then_recovers(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object], proxy: _Proxy
) -> None:
    relayed = _relayed(tmp_path, kube, kube_settings, proxy)
    settings = {**kube_settings, "kube_config": relayed, "kube_request_timeout_seconds": 1.0}
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        readyz = f"https://127.0.0.1:{coordinator.coordinator.http_port}/readyz"
        assert httpx.get(readyz).status_code == 200
        proxy.cut()
        job = client.submit(params=PARAMS, num_csx=1, num_steps=10)
        wait_until(
            lambda: "waiting for the backend to start replicas" in job.status.pending_reason,
            60,
            "the job to say it waits for the API server",
        )
        assert job.status.phase is Phase.SCHEDULED
        response = httpx.get(readyz)
        assert response.status_code == 503
        assert "Kubernetes API" in response.json()["reason"]

        proxy.restore()
        list(job.watch(timeout=120))
        assert job.status.phase is Phase.SUCCEEDED, job.status.reason
        wait_until(lambda: httpx.get(readyz).status_code == 200, 30, "/readyz to recover")
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")
