"""Preemption latency (#15): from a P1 job's submit to it RUNNING on systems a P3 job held,
the victim's checkpoint-now included; goal <= 5 s plus that checkpoint's write. And the work
the victim loses: goal 0 steps when its checkpoint arrives in time.

Each run, per model config: a P3 job trains on all 4 systems of the default pool (no periodic
checkpoints: the only one is the one asked for); once it runs, a P1 job needing 2 systems is
submitted (t0) and followed until RUNNING (t1). The victim's events give when it was asked to
checkpoint and when it was requeued; its chief's log gives how long writing the checkpoint
took; its last reported step against the checkpoint step is the work lost. Both jobs are then
cancelled.

    python -m bench.preemption_latency [--runs 3] [--configs fc_mnist gpt2]
"""

from __future__ import annotations

import argparse
import datetime
import re
import time
from pathlib import Path
from typing import Any

import grpc
import yaml

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import CoordinatorProcess, emit, fresh_dir, prepare_store, summarize_ms

GOAL_S = 5.0
EXAMPLES = Path(__file__).resolve().parents[1] / "appliance" / "examples"
CONFIGS = {"fc_mnist": "params_fc_mnist.yaml", "gpt2": "params_gpt2.yaml"}
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _params(config: str) -> str:
    params = yaml.safe_load((EXAMPLES / CONFIGS[config]).read_text())
    params.setdefault("runconfig", {}).pop("checkpoint_steps", None)  # only the one asked for
    return yaml.safe_dump(params)


def _submit(stub: Any, params: str, num_csx: int, priority: int) -> Any:
    spec = cluster_pb2.JobSpec(
        params_yaml=params, num_csx=num_csx, num_steps=1_000_000, priority=priority
    )
    return stub.SubmitJob(cluster_pb2.SubmitJobRequest(spec=spec, user="bench"), timeout=30)


def _wait(stub: Any, job_id: str, ready: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        job = stub.GetJob(cluster_pb2.GetJobRequest(job_id=job_id), timeout=10)
        if ready(job):
            return job
        if time.monotonic() > deadline:
            raise RuntimeError(f"{job_id} stuck in {common_pb2.Phase.Name(job.phase)}")
        time.sleep(0.02)


def _write_seconds(log: Path) -> float | None:
    """From the chief's 'asked for a checkpoint now' to its 'wrote ...checkpoint' line."""
    asked = wrote = None
    for line in log.read_text().splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        moment = datetime.datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if "asked for a checkpoint now" in line:
            asked = moment
        elif asked is not None and "wrote " in line and "checkpoint_" in line:
            wrote = moment
            break
    return None if asked is None or wrote is None else wrote - asked


def one_preemption(stub: Any, data_dir: Path, config: str) -> dict[str, Any]:
    params = _params(config)
    victim = _submit(stub, params, 4, common_pb2.PRIORITY_P3)
    _wait(stub, victim.id, lambda j: j.progress.step >= 3)
    t0 = time.perf_counter()
    urgent = _submit(stub, params, 2, common_pb2.PRIORITY_P1)
    _wait(stub, urgent.id, lambda j: j.phase == common_pb2.PHASE_RUNNING)
    total = time.perf_counter() - t0
    requeued = _wait(
        stub, victim.id, lambda j: j.attempt >= 2 or j.phase == common_pb2.PHASE_QUEUED
    )
    events = stub.GetJobEvents(cluster_pb2.GetJobEventsRequest(job_id=victim.id)).events
    asked = next(e for e in events if "asked for a checkpoint" in e.reason)
    queued = next(e for e in events if e.to_phase == common_pb2.PHASE_QUEUED and e.seq > asked.seq)
    step = re.search(r"checkpointed at step (\d+)", queued.reason)
    log = data_dir / "jobs" / victim.id / "logs" / "chief-0.log"
    for job_id in (urgent.id, victim.id):
        stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job_id, reason="bench"), timeout=30)
    for job_id in (urgent.id, victim.id):
        _wait(stub, job_id, lambda j: j.phase == common_pb2.PHASE_CANCELLED)
    return {
        "config": config,
        "submit_to_running_s": round(total, 3),
        "asked_to_requeued_s": round(queued.time - asked.time, 3),
        "checkpoint_write_s": _write_seconds(log),
        "checkpoint_step": int(step[1]) if step else None,
        "last_step_reported": requeued.progress.step,
        "steps_lost": requeued.progress.step - int(step[1]) if step else None,
        "reason": queued.reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    data_dir = fresh_dir("preemption-latency")
    prepare_store(data_dir)
    coordinator = CoordinatorProcess(data_dir)
    runs: list[dict[str, Any]] = []
    try:
        address = coordinator.wait_address()
        with grpc.insecure_channel(address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            for config in args.configs:
                for _ in range(args.runs):
                    runs.append(one_preemption(stub, data_dir, config))
    finally:
        coordinator.stop()
    results: dict[str, Any] = {
        "goal": f"P1 submit -> RUNNING <= {GOAL_S:.0f} s plus the victim's checkpoint write; "
        "0 steps lost",
    }
    for config in args.configs:
        mine = [r for r in runs if r["config"] == config]
        beyond = [r["submit_to_running_s"] - (r["checkpoint_write_s"] or 0.0) for r in mine]
        results[config] = {
            "runs": len(mine),
            "submit_to_running": summarize_ms([r["submit_to_running_s"] for r in mine]),
            "checkpoint_write_s": [r["checkpoint_write_s"] for r in mine],
            "beyond_checkpoint": {
                **summarize_ms(beyond),
                "met": max(beyond) <= GOAL_S,
            },
            "steps_lost": [r["steps_lost"] for r in mine],
            "first_reason": mine[0]["reason"] if mine else "",
        }
    emit("preemption_latency", results)


if __name__ == "__main__":
    main()
