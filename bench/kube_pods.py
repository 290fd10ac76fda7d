"""Kubernetes backend against a real kube-apiserver with fake nodes (issue #3's goals).

A real etcd + kube-apiserver (tests/kube/cluster.py), the stand-in kubelet in --simulate mode
(KWOK-style: it binds pods to 64 fake CS-2 nodes and reports them Running without running
them) and `appliance serve` with APPLIANCE_BACKEND=kubernetes as its own process. The bench
watches the pods itself (admin token) and records when each pod was ADDED and went Running.

1. SCHEDULED -> every pod of a 16-CS-2 job Running (goal <= 2 s), over --runs jobs one at a
   time: the SCHEDULED time is the job event's timestamp (the coordinator's clock, same host).
2. --jobs concurrent 16-CS-2 jobs (~2,000 pods): pods created per second from one coordinator
   (goal >= 100/s), API errors in the coordinator's log (goal 0) and lost watch events (goal 0:
   every pod the API server shows Running is STARTED in the job's replicas). Then every job is
   cancelled at once; the time until no pod is left and the API calls retried meanwhile are
   reported too.

    python -m bench.kube_pods [--jobs 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import grpc
import httpx

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import EXAMPLE_PARAMS, CoordinatorProcess, emit, fresh_dir
from tests.kube.cluster import ADMIN_TOKEN, NAMESPACE, REPO, KubeCluster

GOAL_SCHEDULED_TO_RUNNING_S = 2.0
GOAL_PODS_PER_S = 100.0
JOB_LABEL = "appliance.io/job-id"


class PodWatch:
    """Times at which each pod was first seen and first Running, by job id."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.job_of: dict[str, str] = {}
        self.lock = threading.Lock()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(30)

    def _run(self) -> None:
        c = self.cluster
        listed = c.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()
        version = listed["metadata"]["resourceVersion"]
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        while True:
            params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "600"}
            try:
                with httpx.stream(
                    "GET", f"{c.server}/api/v1/namespaces/{NAMESPACE}/pods",
                    params=params, headers=headers, verify=False, timeout=None,
                ) as response:  # fmt: skip
                    self.ready.set()
                    for line in response.iter_lines():
                        event = json.loads(line)
                        pod = event["object"]
                        version = pod["metadata"].get("resourceVersion", version)
                        self._see(event["type"], pod)
            except httpx.HTTPError:  # resume from the last version seen
                continue

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.time()
        name = pod["metadata"]["name"]
        job = (pod["metadata"].get("labels") or {}).get(JOB_LABEL)
        if not job or kind == "DELETED":
            return
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        with self.lock:
            self.job_of[name] = job
            self.added.setdefault(name, now)
            if any("running" in (s.get("state") or {}) for s in statuses):
                self.running.setdefault(name, now)

    def of_job(self, job: str) -> tuple[list[float], list[float]]:
        with self.lock:
            names = [n for n, j in self.job_of.items() if j == job]
            return [self.added[n] for n in names], [
                self.running[n] for n in names if n in self.running
            ]


def submit(stub: cluster_pb2_grpc.ClusterServiceStub, num_csx: int) -> str:
    spec = cluster_pb2.JobSpec(
        params_yaml=EXAMPLE_PARAMS.read_text(), num_csx=num_csx, num_steps=1_000_000,
        mode=common_pb2.MODE_TRAIN,
    )  # fmt: skip
    job = stub.SubmitJob(cluster_pb2.SubmitJobRequest(spec=spec), timeout=30)
    return str(job.id)


def scheduled_at(stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str) -> float:
    for event in stub.WatchJob(cluster_pb2.WatchJobRequest(job_id=job_id), timeout=60):
        if (
            event.kind == cluster_pb2.JOB_EVENT_KIND_PHASE
            and event.to_phase == common_pb2.PHASE_SCHEDULED
        ):
            return float(event.time)
    raise RuntimeError(f"{job_id} was never SCHEDULED")


def replica_count(stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str) -> tuple[int, int]:
    """(replicas, replicas the coordinator saw start) of a job."""
    job = stub.GetJob(cluster_pb2.GetJobRequest(job_id=job_id), timeout=30)
    started = sum(1 for r in job.replicas if r.phase != common_pb2.REPLICA_PHASE_PENDING)
    return len(job.replicas), started


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=64, help="fake CS-2 nodes")
    p.add_argument("--jobs", type=int, default=100, help="concurrent jobs in part 2")
    p.add_argument("--csx", type=int, default=16, help="CS-2 systems per job")
    p.add_argument("--runs", type=int, default=5, help="single jobs timed in part 1")
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args(argv)

    work = fresh_dir("kube_pods")
    cluster = KubeCluster(work / "kube").start()
    kubelet = subprocess.Popen(
        [sys.executable, "-m", "tests.kube.kubelet", "--server", cluster.server,
         "--token", ADMIN_TOKEN, "--namespace", NAMESPACE, "--nodes", str(args.nodes),
         "--node-prefix", "cs2", "--image", "appliance:dev", "--simulate",
         "--workdir", str(work)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=(work / "kubelet.log").open("ab"), text=True,
    )  # fmt: skip
    assert kubelet.stdout is not None and kubelet.stdout.readline().startswith("kubelet ready")
    systems = args.csx * max(args.jobs, 1)
    (work / "data").mkdir()
    coordinator = CoordinatorProcess(
        work / "data",
        extra_env={
            "APPLIANCE_BACKEND": "kubernetes",
            "APPLIANCE_KUBE_CONFIG": str(cluster.kubeconfig),
            "APPLIANCE_KUBE_NAMESPACE": NAMESPACE,
            "APPLIANCE_SYSTEMS": str(systems),
            "APPLIANCE_SWARMX_NODES": str(systems // 2),
            "APPLIANCE_MEMORYX_NODES": str(args.jobs * 2),
            "APPLIANCE_INIT_TIMEOUT_SECONDS": "3600",
            "APPLIANCE_SCHEDULER_INTERVAL": "0.2",
        },
    )
    watch = PodWatch(cluster)
    try:
        address = coordinator.wait_address()
        stub = cluster_pb2_grpc.ClusterServiceStub(grpc.insecure_channel(address))

        # Part 1: one 16-CS-2 job at a time.
        latencies = []
        pods_per_job = 0
        for _ in range(args.runs):
            job = submit(stub, args.csx)
            t_scheduled = scheduled_at(stub, job)
            pods_per_job, _ = replica_count(stub, job)
            wait_for(
                lambda j=job, n=pods_per_job: len(watch.of_job(j)[1]) == n, 60, "pods Running"
            )
            latencies.append(max(watch.of_job(job)[1]) - t_scheduled)
            stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job), timeout=30)
            wait_for(
                lambda: (
                    not cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()[
                        "items"
                    ]
                ),
                60,
                "pods gone",
            )

        # Part 2: many jobs at once.
        t0 = time.time()
        jobs = [submit(stub, args.csx) for _ in range(args.jobs)]
        counts = {j: replica_count(stub, j)[0] for j in jobs}
        total = sum(counts.values())
        wait_for(
            lambda: sum(len(watch.of_job(j)[1]) for j in jobs) == total,
            600,
            f"{total} pods Running",
        )
        added = [t for j in jobs for t in watch.of_job(j)[0]]
        running = [t for j in jobs for t in watch.of_job(j)[1]]
        created_per_s = total / (max(added) - min(added))

        def seen() -> int:
            return sum(replica_count(stub, j)[1] for j in jobs)

        with contextlib.suppress(TimeoutError):
            wait_for(lambda: seen() == total, 60, "the coordinator to see every pod start")
        lost = total - seen()

        def api_errors() -> int:
            return sum(
                1
                for line in coordinator.log_path.read_text().splitlines()
                if "kubernetes " in line and " failed" in line
            )

        errors_while_creating = api_errors()
        t_cancel = time.time()
        for j in jobs:
            stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=j), timeout=30)
        wait_for(
            lambda: (
                not cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()["items"]
            ),
            600,
            "pods gone",
        )
        teardown_s = time.time() - t_cancel

        result = {
            "fake_nodes": args.nodes,
            "scheduled_to_all_running_16csx": {
                "pods_per_job": pods_per_job,
                "runs_s": [round(x, 3) for x in latencies],
                "median_s": round(statistics.median(latencies), 3),
                "max_s": round(max(latencies), 3),
                "goal_s": GOAL_SCHEDULED_TO_RUNNING_S,
                "met": max(latencies) <= GOAL_SCHEDULED_TO_RUNNING_S,
            },
            "concurrent_jobs": {
                "jobs": args.jobs,
                "pods": total,
                "pods_created_per_s": round(created_per_s, 1),
                "all_running_after_s": round(max(running) - t0, 2),
                "api_errors_while_creating": errors_while_creating,
                "api_retries_while_tearing_down": api_errors() - errors_while_creating,
                "lost_watch_events": lost,
                "teardown_all_s": round(teardown_s, 2),
                "goal_pods_per_s": GOAL_PODS_PER_S,
                "met": created_per_s >= GOAL_PODS_PER_S
                and errors_while_creating == 0
                and lost == 0,
            },
        }
        emit("kube_pods", result, ["kube_pods", *(argv if argv is not None else sys.argv[1:])])
    finally:
        coordinator.stop()
        kubelet.terminate()
        cluster.stop()


if __name__ == "__main__":
    main()
