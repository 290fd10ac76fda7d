"""Real containers on a real node (#17): how long a 4-CS-2 job takes to start, and failover.

The chart is installed on a node.sh cluster (deploy/kube-testenv/node.sh: kubelet, containerd,
runc, CNI bridge, kube-proxy, CoreDNS, all inside this machine) with replica requests small
enough for a 4-CS-2 job to fit its CPUs. Jobs are submitted one at a time through
`kubectl port-forward` by the Python client; the benchmark watches the pods with the admin
credentials and records when each pod first has every container running.

1. SCHEDULED -> every container of the job running (goal p99 <= 5 s, the Kubernetes pod
   startup SLO); SCHEDULED is the job event's time (the coordinator's clock: same host).
2. Submit -> RUNNING end to end (the client's call to the RUNNING event).
3. Failover (goal <= 15 s): the chart with two coordinators on PostgreSQL (tests/node/ha.py);
   a 1-CS-2 job runs; the leader's container is SIGKILLed by the runtime (t0); a 1-CS-2 job
   is submitted through whichever pod is Ready, retrying (port-forward included) until one
   leads; t1 is its SCHEDULED event. Median and worst of --failover-runs.

    python -m bench.real_node [--runs 20] [--failover-runs 5]   # as root; ~6 min + the node
    APPLIANCE_NODE_ENV=/tmp/node/env python -m bench.real_node  # a node already up
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes import watch as kube_watch

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from bench.common import EXAMPLE_PARAMS, emit
from tests.kube.node import RealNode, build_image, wait_for
from tests.node.ha import HaRelease, ha_release

GOAL_P99_S = 5.0
GOAL_FAILOVER_S = 15.0
NAMESPACE = "appliance-bench"
CHART = Path(__file__).resolve().parent.parent / "helm" / "appliance"
SMALL = json.dumps({role: {"cpu": "50m"} for role in ("chief", "cs2", "memoryx", "swarmx")})


class ContainersRunning:
    """When each pod (by job id) first had all its containers running, on this host's clock."""

    def __init__(self, kubeconfig: str) -> None:
        kube_config.load_kube_config(kubeconfig)
        self.api = kube_client.CoreV1Api()
        self.at: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        stream = kube_watch.Watch().stream(self.api.list_namespaced_pod, NAMESPACE)
        for event in stream:
            pod = event["object"]
            job = (pod.metadata.labels or {}).get("appliance.io/job-id")
            statuses = pod.status.container_statuses or []
            if job and statuses and all(s.state.running for s in statuses):
                with self.lock:
                    self.at.setdefault(job, {}).setdefault(pod.metadata.name, time.time())

    def all_running(self, job: str, pods: int) -> float | None:
        with self.lock:
            times = self.at.get(job, {})
            return max(times.values()) if len(times) == pods else None


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def measure(node: RealNode, runs: int) -> dict[str, Any]:
    node.kubectl("create", "namespace", NAMESPACE, check=False)
    done = node.helm(
        "upgrade", "--install", "appliance", str(CHART), "--namespace", NAMESPACE, "--wait",
        "--timeout", "180s", "--set", "image.pullPolicy=Never", "--set", "pool.systems=4",
        "--set-json", f"replicaResources={SMALL}",
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"helm install failed: {done.stderr}")
    token = node.kubectl("-n", NAMESPACE, "get", "secret", "appliance-auth", "-o",
                         "jsonpath={.data.admin-token}")  # fmt: skip
    token = base64.b64decode(token).decode()
    watcher = ContainersRunning(node.env["KUBECONFIG"])
    started: list[float] = []
    to_running: list[float] = []
    with (
        node.port_forward(NAMESPACE, "svc/appliance", 50051) as (port,),
        ApplianceClient(f"127.0.0.1:{port}", token=token) as client,
    ):
        for _ in range(runs):
            submitted = time.time()
            job = client.submit(params=str(EXAMPLE_PARAMS), num_csx=4, num_steps=20)
            final = job.wait(timeout=300)
            assert final.phase == Phase.SUCCEEDED, final.reason
            events = {e.to_phase: e.time for e in client.events(job.id) if e.to_phase}
            pods = len(client.get_job(job.id).replicas)
            running = wait_for(lambda: watcher.all_running(job.id, pods), "pods seen running")  # noqa: B023
            started.append(running - events[Phase.SCHEDULED])
            to_running.append(events[Phase.RUNNING] - submitted)
    node.helm("uninstall", "appliance", "--namespace", NAMESPACE, "--wait")
    p99 = _percentile(started, 0.99)
    return {
        "runs": runs,
        "pods_per_job": pods,
        "scheduled_to_all_containers_running_s": {
            "p50": round(statistics.median(started), 3),
            "p99": round(p99, 3),
            "max": round(max(started), 3),
            "each": [round(s, 3) for s in started],
        },
        "submit_to_running_s": {
            "p50": round(statistics.median(to_running), 3),
            "p99": round(_percentile(to_running, 0.99), 3),
            "max": round(max(to_running), 3),
        },
        "node_startup_log": node.startup_log.strip().splitlines()[-2:],
        "goal_p99_s": GOAL_P99_S,
        "met": p99 <= GOAL_P99_S,
    }


def failover(ha: HaRelease) -> float:
    """Seconds from the leader's kill to a new job's SCHEDULED event (same host clock)."""
    leader = wait_for(ha.leader_pod, "a leader")
    with ha.client(leader) as client:
        running = client.submit(params=str(EXAMPLE_PARAMS), num_csx=1, num_steps=100_000,
                                detach=True)  # fmt: skip
        wait_for(lambda: client.get_job(running.id).phase is Phase.RUNNING, "running")
    _, killed_at = ha.kill_leader()
    job_id, via = ha.submit_to_leader(num_steps=20)
    with ha.client(via) as client:
        scheduled = wait_for(
            lambda: next(
                (e.time for e in client.events(job_id) if e.to_phase is Phase.SCHEDULED), None
            ),
            "SCHEDULED",
        )
        for job in (running.id, job_id):
            client.cancel_job(job)
    # Both coordinators up again (the killed container restarts) before the next run.
    wait_for(lambda: all(_running(p) for p in ha.pods()), "both coordinators running")
    return float(scheduled - killed_at)


def _running(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses", [])
    return bool(statuses) and all(s.get("state", {}).get("running") for s in statuses)


def measure_failover(node: RealNode, runs: int) -> dict[str, Any]:
    with ha_release(node, "appliance-bench-ha") as ha:
        times = [failover(ha) for _ in range(runs)]
    return {
        "runs": runs,
        "kill_to_scheduled_s": {
            "median": round(statistics.median(times), 3),
            "worst": round(max(times), 3),
            "each": [round(t, 3) for t in times],
        },
        "goal_s": GOAL_FAILOVER_S,
        "met": max(times) <= GOAL_FAILOVER_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--failover-runs", type=int, default=5)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    existing = os.environ.get("APPLIANCE_NODE_ENV")
    if existing:
        node = RealNode.existing(Path(existing))
    else:
        node = RealNode.up(Path(tempfile.mkdtemp(prefix="bench-node-")), [build_image()])
    try:
        startup = measure(node, args.runs)
        emit("real_node", {**startup, "failover": measure_failover(node, args.failover_runs)})
    finally:
        node.down()


if __name__ == "__main__":
    main()
