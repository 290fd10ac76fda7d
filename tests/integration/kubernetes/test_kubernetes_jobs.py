"""wsjobs on the Kubernetes backend: pods on a real API server, run by the stand-in kubelet."""

from __future__ import annotations

import base64
import json
import os
import signal
from pathlib import Path
from typing import Any

from appliance.client import ApplianceClient
from appliance.domain.job import EventKind, ReplicaPhase
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import serving, wait_until, worker_processes
from tests.integration.kubernetes.conftest import PARAMS
from tests.kube.cluster import NAMESPACE, KubeCluster

NETWORKING = "/apis/networking.k8s.io/v1"


def pods_of(kube: KubeCluster, job_id: str) -> list[dict[str, object]]:
    response = kube.request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        params={"labelSelector": f"appliance.io/job-id={job_id}"},
    )
    response.raise_for_status()
    return list(response.json()["items"])


def job_objects_gone(kube: KubeCluster, job_id: str) -> bool:
    """No pod, Service, ConfigMap, Secret or NetworkPolicy of the job is left."""
    if pods_of(kube, job_id):
        return False
    core, networking = f"/api/v1/namespaces/{NAMESPACE}", f"{NETWORKING}/namespaces/{NAMESPACE}"
    for path in (
        f"{core}/services/{job_id}",
        f"{core}/configmaps/{job_id}",
        f"{core}/secrets/{job_id}-credentials",
        f"{networking}/networkpolicies/{job_id}-peers",
    ):
        if kube.request("GET", path).is_success:
            return False
    return True


def test_replica_credentials_come_from_the_jobs_secret_not_the_pod_spec(
    client: ApplianceClient, kube: KubeCluster
) -> None:
    job = client.submit(params=PARAMS, num_csx=1, num_steps=100_000)
    wait_until(lambda: job.status.progress.step >= 1, 120, "the job to train")
    # The replicas authenticated each other with the token and their own certificates (mutual
    # TLS) the Secret carried; anyone who may read pods sees no credential in them, and each
    # pod names its own certificate's keys only.
    pods = pods_of(kube, job.id)
    secret = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{job.id}-credentials")
    data = secret.json()["data"]
    names = {p["metadata"]["labels"]["appliance.io/replica"] for p in pods}
    assert len(pods) == 4 and set(data) == {  # authentication is off here: no replica token
        "APPLIANCE_DATAPLANE_TOKEN", "APPLIANCE_COORDINATOR_CA", "replica-ca.crt",
        *(f"{name}.{kind}" for name in names for kind in ("crt", "key")),
    }  # fmt: skip
    specs = json.dumps([p["spec"] for p in pods])
    assert not any(base64.b64decode(value).decode() in specs for value in data.values())
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        keys = {
            e["valueFrom"]["secretKeyRef"]["key"]
            for e in container["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        own = pod["metadata"]["labels"]["appliance.io/replica"]
        assert {k for k in keys if k.endswith((".crt", ".key"))} == {
            f"{own}.crt",
            f"{own}.key",
            "replica-ca.crt",
        }, pod["metadata"]["name"]
    assert secret.json()["metadata"]["ownerReferences"][0]["name"] == job.id
    policy = kube.request(
        "GET", f"{NETWORKING}/namespaces/{NAMESPACE}/networkpolicies/{job.id}-peers"
    ).json()
    peers = {"matchLabels": {"app.kubernetes.io/name": "appliance",
                             "app.kubernetes.io/managed-by": "appliance-coordinator",
                             "appliance.io/job-id": job.id}}  # fmt: skip
    assert policy["spec"]["podSelector"] == peers
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": peers}]}]
    job.cancel()
    wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


def test_two_cs2_job_runs_as_pods_and_succeeds(client: ApplianceClient, kube: KubeCluster) -> None:
    job = client.submit(params=PARAMS, num_csx=2, num_steps=20)
    events = list(job.watch(timeout=120))
    phases = [e.to_phase for e in events if e.kind is EventKind.PHASE]
    assert phases == [
        Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED,
    ]  # fmt: skip
    final = job.wait(timeout=30)
    assert final.progress.step == 20
    chief = next(r for r in final.replicas if r.name == "chief-0")
    assert (chief.phase, chief.exit_code) == (ReplicaPhase.SUCCEEDED, 0)
    assert {r.role.value for r in final.replicas} == {"chief", "cs2", "memoryx", "swarmx"}
    wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")
    # The pods are gone; their logs were kept at teardown and are still served.
    by_replica: dict[str, list[str]] = {}
    for replica, line in client.logs(job.id):
        by_replica.setdefault(replica, []).append(line)
    assert set(by_replica) == {"chief-0", "cs2-0", "cs2-1", "memoryx-0", "swarmx-0"}
    assert any("serving on 127.0.0.1:" in line for line in by_replica["cs2-1"])


def test_a_failed_pods_termination_message_ends_the_jobs_reason(
    client: ApplianceClient, kube: KubeCluster, tmp_path: Path
) -> None:
    """The worker writes its last error line to the pod's termination message; the reason
    ends with it (not the log's tail, not a plain "Error")."""
    junk = tmp_path / "checkpoint_2.npz"
    junk.write_bytes(b"PK\x03\x04 torn")  # a zip's start: accepted at submit
    params = {"model": {"name": "fc_mnist"}, "runconfig": {"checkpoint_path": str(junk)}}
    job = client.submit(params=params, num_csx=1, num_steps=4)

    list(job.watch(timeout=60))
    final = job.status
    assert final.phase is Phase.FAILED
    assert final.reason.startswith("replica chief-0 exited with exit code 1: "), final.reason
    assert f"checkpoint {junk} cannot be read: " in final.reason
    # The teardown deletes the pods as the job ends: when the chief's is still there, its
    # termination message is what the reason ends with.
    for chief in [p for p in pods_of(kube, job.id) if p["metadata"]["name"].endswith("chief-0")]:
        ended = chief["status"]["containerStatuses"][0]["state"]["terminated"]  # type: ignore[index]
        assert final.reason.endswith(ended["message"].strip())


def test_replica_exiting_non_zero_fails_the_job_with_its_name_and_code(
    client: ApplianceClient, kube: KubeCluster
) -> None:
    job = client.submit(params=PARAMS, num_csx=2, num_steps=100_000)
    wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
    (victim,) = [p for p in worker_processes(job.id) if "cs2-1" in p.cmdline()]
    os.killpg(victim.pid, signal.SIGKILL)

    list(job.watch(timeout=30))
    final = job.status
    assert final.phase is Phase.FAILED
    assert final.reason.startswith("replica cs2-1 exited with exit code 137"), final.reason
    cs2 = next(r for r in final.replicas if r.name == "cs2-1")
    assert cs2.exit_code == 137
    # The log tail came from the pod's log, read through the API server's pods/log proxy.
    assert "cs2-1 of " + job.id in cs2.log_tail
    wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")


def test_cancel_deletes_pods_and_service_and_frees_the_systems(
    client: ApplianceClient, kube: KubeCluster
) -> None:
    job = client.submit(params=PARAMS, num_csx=2, num_steps=100_000)
    wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
    assert len(pods_of(kube, job.id)) == 5
    # While the pods run, their logs come through the API server's pods/log proxy.
    lines = [line for _, line in client.logs(job.id, "cs2-0")]
    assert any(f"cs2-0 of {job.id} serving on" in line for line in lines), lines
    assert kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{job.id}").is_success

    assert job.cancel().changed
    wait_until(lambda: job_objects_gone(kube, job.id), 30, "the job's objects to be deleted")
    assert not worker_processes(job.id)
    assert all(n.used == 0 for n in client.nodes()), client.nodes()
    assert job.status.phase is Phase.CANCELLED


def test_keep_failed_policy_keeps_a_failed_jobs_pods_for_debugging(
    tmp_path: Path, kube: KubeCluster, kube_settings: dict[str, object]
) -> None:
    settings = {**kube_settings, "kube_clean_pod_policy": "keep-failed"}
    with (
        serving(tmp_path / "data", **settings) as coordinator,
        ApplianceClient(coordinator.address) as client,
    ):
        job = client.submit(params=PARAMS, num_csx=2, num_steps=100_000)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        names = {f"{job.id}-a1-{r.name}" for r in job.status.replicas}
        (victim,) = [p for p in worker_processes(job.id) if "cs2-1" in p.cmdline()]
        os.killpg(victim.pid, signal.SIGKILL)
        list(job.watch(timeout=30))
        assert job.status.phase is Phase.FAILED

        def all_pods_ended() -> bool:  # the others stop by themselves: the job is over
            return all(_exit_code(p) is not None for p in pods_of(kube, job.id))

        wait_until(all_pods_ended, 30, "the job's other replicas to stop")
        # Every pod of the failed job stays, not only the failed replica's.
        assert {p["metadata"]["name"] for p in pods_of(kube, job.id)} == names
        codes = {p["metadata"]["name"]: _exit_code(p) for p in pods_of(kube, job.id)}
        assert codes[f"{job.id}-a1-cs2-1"] == 137
        # The ConfigMap that owns the kept pods stays (deleting it removes them); the Service
        # and the credentials go.
        ns = f"/api/v1/namespaces/{NAMESPACE}"
        assert kube.request("GET", f"{ns}/configmaps/{job.id}").is_success
        assert kube.request("GET", f"{ns}/services/{job.id}").status_code == 404
        assert kube.request("GET", f"{ns}/secrets/{job.id}-credentials").status_code == 404
        # What the README and NOTES say to run when done with them:
        #   kubectl delete configmap,pod -l appliance.io/job-id=<job>
        # (no garbage collector runs here, so the pods are deleted by the selector too).
        selector = {"labelSelector": f"appliance.io/job-id={job.id}"}
        for kind in ("configmaps", "pods"):
            kube.request("DELETE", f"{ns}/{kind}", params=selector).raise_for_status()
        wait_until(lambda: job_objects_gone(kube, job.id), 30, "the kept objects to be deleted")


def _exit_code(pod: dict[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (status.get("state") or {}).get("terminated")
        if ended is not None:
            return int(ended["exitCode"])
    return None


def test_a_credentials_secret_planted_ahead_of_the_job_fails_it(
    client: ApplianceClient, kube: KubeCluster
) -> None:
    """A job id is seen while the job queues; someone who may create Secrets must not choose
    the token its replicas will trust."""
    big = client.submit(params=PARAMS, num_csx=4, num_steps=100_000)
    wait_until(lambda: big.status.phase is Phase.RUNNING, 120, "the 4-system job to run")
    queued = client.submit(params=PARAMS, num_csx=1, num_steps=5)
    planted = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{queued.id}-credentials", "namespace": NAMESPACE},
        "stringData": {"APPLIANCE_DATAPLANE_TOKEN": "chosen-by-someone-else"},
    }
    kube.apply(planted)
    big.cancel()
    wait_until(lambda: queued.status.phase.terminal, 120, "the queued job to end")
    status = queued.status
    assert status.phase is Phase.FAILED
    assert f"a Secret {queued.id}-credentials the coordinator did not make" in status.reason
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/secrets/{queued.id}-credentials")
