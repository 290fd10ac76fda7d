"""What a 2-CPU node taught the chart: sizes, unschedulable pods, kept pods (#17's fixes).

A release of its own (namespace appliance-sizes) with the default replica requests: a 4-CS-2
job asks more CPU than this node has. The coordinator says so at start (/readyz warnings),
the job's pods stay Pending with kube-scheduler's reason and the job fails with it after the
pending timeout (the chief waits for its peers that long instead of failing at 10 s). With
the requests the README gives for a 2-CPU node the same job runs. keep-failed keeps every pod
of a failed job until the documented command deletes them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import httpx
import pytest

from appliance.client import ApplianceClient
from appliance.client.errors import JobFailed
from appliance.domain.phases import Phase
from tests.kube.cluster import REPO, RESTRICTED
from tests.kube.node import RealNode, wait_for
from tests.node.conftest import install
from tests.node.test_chart_on_node import PARAMS, _all_running, _job_pods

README = REPO / "README.md"
NAMESPACE = "appliance-sizes"
# Longer than two of the chief's 10 s windows of waiting for its peers: the job must outlive
# them and fail on the pending timeout, with the scheduler's reason.
PENDING_TIMEOUT = 25
# The README's sizes for a 2-CPU node, as a user would paste them from its table.
(README_2CPU,) = re.findall(r"\| 2 CPU, 4 GiB .*?replicaResources=(\{.*?\})'", README.read_text())


@pytest.fixture(scope="module")
def sized(node: RealNode) -> Iterator[str]:
    node.kubectl("create", "namespace", NAMESPACE, check=False)
    labels = [f"{key}={value}" for key, value in RESTRICTED.items()]
    node.kubectl("label", "--overwrite", "namespace", NAMESPACE, *labels)
    install(
        node, NAMESPACE, "--set", "pool.systems=4",
        "--set", f"settings.kubePendingTimeoutSeconds={PENDING_TIMEOUT}",
    )  # fmt: skip
    secret = node.kubectl_json("-n", NAMESPACE, "get", "secret", "appliance-auth")
    yield base64.b64decode(secret["data"]["admin-token"]).decode()
    node.helm("uninstall", "appliance", "--namespace", NAMESPACE, "--wait")
    node.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_a_job_bigger_than_the_node_is_warned_of_and_fails_with_the_schedulers_reason(
    node: RealNode, sized: str
) -> None:
    with node.port_forward(NAMESPACE, "svc/appliance", 50051, 8080) as (grpc_port, http_port):
        ready = httpx.get(f"https://127.0.0.1:{http_port}/readyz", timeout=10).json()
        assert ready["status"] == "ok"
        (warning,) = ready["warnings"]
        assert "largest job" in warning and "does not fit" in warning, warning
        with ApplianceClient(f"127.0.0.1:{grpc_port}", token=sized) as client:
            job = client.submit(params=str(PARAMS), num_csx=4, num_steps=50)
            with pytest.raises(JobFailed) as failed:
                job.wait(timeout=300)
    reason = failed.value.job.reason
    assert "unschedulable" in reason and "Insufficient cpu" in reason, reason
    assert reason.startswith("replica "), reason  # names the pod's replica
    assert "not running after" not in reason  # not the chief's 10 s peer window


def test_with_the_readme_sizes_for_two_cpus_the_job_runs_and_keep_failed_keeps_its_pods(
    node: RealNode, sized: str
) -> None:
    install(
        node, NAMESPACE, "--reuse-values", "--set-json", f"replicaResources={README_2CPU}",
        "--set", "cleanPodPolicy=keep-failed",
    )  # fmt: skip
    with node.port_forward(NAMESPACE, "svc/appliance", 50051, 8080) as (grpc_port, http_port):
        # The new coordinator pod (a new ReplicaSet) answers: no warning any more.

        def without_warnings() -> dict[str, object] | None:
            ready = httpx.get(f"https://127.0.0.1:{http_port}/readyz", timeout=10).json()
            return None if ready["warnings"] else dict(ready)

        ready = wait_for(without_warnings, "/readyz without warnings")
        assert ready["status"] == "ok"
        with ApplianceClient(f"127.0.0.1:{grpc_port}", token=sized) as client:
            job = client.submit(params=str(PARAMS), num_csx=4, num_steps=50)
            assert job.wait(timeout=300).phase == Phase.SUCCEEDED
            doomed = client.submit(params=str(PARAMS), num_csx=2, num_steps=3000)
            pods = wait_for(lambda: _all_running(node, NAMESPACE, doomed.id, 5), "running")
            assert len(pods) == 5
            node.kill_container(NAMESPACE, f"{doomed.id}-a1-cs2-0")
            with pytest.raises(JobFailed):
                doomed.wait(timeout=300)
    # Every pod of the failed job stays (not only the one that failed), with its ConfigMap.
    kept = _job_pods(node, NAMESPACE, doomed.id)
    assert len(kept) == 5, [p["metadata"]["name"] for p in kept]  # type: ignore[index]
    selector = f"appliance.io/job-id={doomed.id}"
    node.kubectl("-n", NAMESPACE, "delete", "configmap,pod", "-l", selector, "--wait=true")
    assert not _job_pods(node, NAMESPACE, doomed.id)
