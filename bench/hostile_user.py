"""The hostile-user goal of #36: one user opening 1,000 streams and sending requests as fast as
it can, while 10 other users work, leaves the others' ListJobs p99 <= 100 ms and their submits
succeeding.

Each case runs a fresh `appliance serve` (sim backend, tokens for 11 users: authentication on,
as a cluster runs) and two load processes apart from it, each on its own grpc.aio loop:

- the hostile user: `--streams` WatchJobs streams opened at once (each held open, listening to
  every job change), and `--flooders` callers sending ListJobs back to back;
- the 10 others: each lists its jobs (ListJobs, mine) every `--list-every` s and submits a
  small job every `--submit-every` s, for `--seconds`; their ListJobs latencies and submit
  outcomes are the result.

Cases, in one run: `limits_on` (the built-in per-user limits: 128 streams, 50 requests/s
in bursts of 200, 256 jobs waiting per user) and `limits_off` (APPLIANCE_LIMITS_ENABLED=false:
the before).

    python -m bench.hostile_user [--seconds 20] [--streams 1000] [--flooders 32]
        [--cases limits_on,limits_off] [--streams-cap N] [--trees eab535c,HEAD] [--no-record]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import grpc
import psutil

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2
from appliance.server.auth import create_token
from bench.common import (
    CoordinatorProcess,
    code_tree,
    emit,
    fresh_dir,
    prepare_store_with,
    summarize_ms,
)

OTHERS = [f"user{i:02d}" for i in range(10)]
PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
_TERMINAL = frozenset(
    {common_pb2.PHASE_SUCCEEDED, common_pb2.PHASE_FAILED, common_pb2.PHASE_CANCELLED}
)
WARMUP_ALLOWANCE = 60.0  # at most, the others' warm-up (the hostile user keeps on through it)
GOAL = "the 10 other users' ListJobs p99 <= 100 ms and every submit of theirs succeeding"


def _meta(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def _hostile(
    address: str, token: str, streams: int, flooders: int, seconds: float, stop: Any
) -> dict[str, Any]:
    """Until `stop` is set (the others' window is over), at most `seconds`."""
    codes: dict[str, int] = {}
    opened = 0
    calls = 0

    def count(code: grpc.StatusCode) -> None:
        codes[code.name] = codes.get(code.name, 0) + 1

    async with grpc.aio.insecure_channel(address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        deadline = time.monotonic() + seconds

        async def hold() -> None:
            nonlocal opened
            call = stub.WatchJobs(pb.ListJobsRequest(), metadata=_meta(token))
            try:
                first = True
                async for _ in call:  # held open: every job change comes to it
                    if first:
                        opened += 1
                        first = False
            except grpc.aio.AioRpcError as exc:
                count(exc.code())

        async def flood() -> None:
            nonlocal calls
            while time.monotonic() < deadline and not stop.is_set():
                try:
                    await stub.ListJobs(pb.ListJobsRequest(), metadata=_meta(token))
                    count(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as exc:
                    count(exc.code())
                calls += 1

        holders = [asyncio.ensure_future(hold()) for _ in range(streams)]
        # The streams are held until the end, flooded or not (`--flooders 0`).
        stopped = asyncio.get_running_loop().run_in_executor(None, stop.wait, seconds)
        await asyncio.gather(*(flood() for _ in range(flooders)), stopped)
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
    return {"streams_opened": opened, "flood_calls": calls, "codes": codes}


async def _others(
    address: str, tokens: dict[str, str], seconds: float, list_every: float, submit_every: float
) -> dict[str, Any]:
    latencies: list[float] = []
    list_errors: dict[str, int] = {}
    submits = {"ok": 0, "refused": 0}
    refusals: list[str] = []
    spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        warmup = await _warm_up(stub, tokens, spec)
        deadline = time.monotonic() + seconds

        async def lister(token: str) -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    await stub.ListJobs(pb.ListJobsRequest(mine=True), metadata=_meta(token))
                    latencies.append(time.perf_counter() - started)
                except grpc.aio.AioRpcError as exc:
                    list_errors[exc.code().name] = list_errors.get(exc.code().name, 0) + 1
                await asyncio.sleep(max(0.0, list_every - (time.perf_counter() - started)))

        async def submitter(token: str) -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=_meta(token))
                    submits["ok"] += 1
                except grpc.aio.AioRpcError as exc:
                    submits["refused"] += 1
                    refusals.append(f"{exc.code().name}: {exc.details()}"[:200])
                await asyncio.sleep(max(0.0, submit_every - (time.perf_counter() - started)))

        await asyncio.gather(
            *(lister(tokens[u]) for u in OTHERS), *(submitter(tokens[u]) for u in OTHERS)
        )
    return {
        "cpu_s": time.process_time(),  # this process's, to its end
        "warmup": warmup,
        "list_jobs": summarize_ms(latencies) if latencies else {},
        "list_errors": list_errors,
        "submits": submits,
        "submit_refusals": sorted(set(refusals))[:5],
    }


async def _warm_up(
    stub: cluster_pb2_grpc.ClusterServiceStub, tokens: dict[str, str], spec: pb.JobSpec
) -> dict[str, float]:
    """Before the measured window, as a latency benchmark warms up: each user's first listing
    and submit (the connection set up, the coordinator's first-use paths: statements compiled
    and cached, the first jobs scheduled and ended), then until those jobs have ended. What
    it took is reported apart, not in the percentiles."""
    started = time.perf_counter()
    firsts: list[float] = []
    submitted = []
    for user in OTHERS:
        began = time.perf_counter()
        await stub.ListJobs(pb.ListJobsRequest(mine=True), metadata=_meta(tokens[user]))
        firsts.append(time.perf_counter() - began)
        job = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=_meta(tokens[user]))
        submitted.append((user, job.id))
    for user, job_id in submitted:
        request = pb.WatchJobRequest(job_id=job_id)
        async for event in stub.WatchJob(request, metadata=_meta(tokens[user])):
            if event.to_phase in _TERMINAL:
                break
    return {
        "first_list_ms_max": round(max(firsts) * 1000, 1),
        "seconds": round(time.perf_counter() - started, 2),
    }


def _cpu(proc: psutil.Process) -> float:
    """CPU seconds a load process has used so far (it is alive: it has not put its result)."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def _run(target: str, args: tuple[Any, ...], out: Any) -> None:
    work = _hostile if target == "hostile" else _others
    out.put(asyncio.run(work(*args)))


def run_case(
    name: str, limits: bool, options: argparse.Namespace, tree: Path | None = None
) -> dict[str, Any]:
    """One case against this checkout's coordinator, or `tree`'s (another commit's)."""
    data_dir = fresh_dir(f"hostile_user-{name}")
    prepare_store_with(tree, data_dir, ())
    tokens_file = data_dir / "tokens.yaml"
    tokens = {u: create_token(tokens_file, u, ["team"], admin=False) for u in [*OTHERS, "mallory"]}
    env = {
        "APPLIANCE_BACKEND": "sim",
        "APPLIANCE_SIM_STEP_SECONDS": "0.05",
        "APPLIANCE_AUTH_TOKENS_FILE": str(tokens_file),
        "APPLIANCE_LIMITS_ENABLED": "true" if limits else "false",
    }
    # Its own limits file, always: the benchmarks' default (bench.common.LIFTED) lifts the caps
    # this benchmark measures.
    caps = f"{{streams: {options.streams_cap}}}" if options.streams_cap else "{}"
    (data_dir / "limits.yaml").write_text(f"defaults: {caps}\n")
    env["APPLIANCE_LIMITS_FILE"] = str(data_dir / "limits.yaml")
    with CoordinatorProcess(data_dir, extra_env=env, tree=tree) as coordinator:
        address = coordinator.wait_address()
        context = multiprocessing.get_context("spawn")
        results: Any = context.Queue()
        stop = context.Event()
        longest = options.seconds + 2 + WARMUP_ALLOWANCE
        hostile = context.Process(
            target=_run,
            args=("hostile", (address, tokens["mallory"], options.streams, options.flooders,
                              longest, stop), results),
        )  # fmt: skip
        hostile.start()
        time.sleep(2.0)  # its streams opened and its flood under way before the others start
        others = context.Process(
            target=_run,
            args=("others", (address, tokens, options.seconds, options.list_every,
                             options.submit_every), results),
        )  # fmt: skip
        loads = {"hostile": psutil.Process(hostile.pid)}
        cpu_before = {"coordinator": coordinator.cpu_seconds(), "hostile": _cpu(loads["hostile"])}
        began = time.monotonic()
        others.start()
        found = [results.get(timeout=longest + 60)]  # the others', at the end of their window
        elapsed = time.monotonic() - began
        cpu = {"coordinator": coordinator.cpu_seconds() - cpu_before["coordinator"],
               "hostile": _cpu(loads["hostile"]) - cpu_before["hostile"],
               "others": found[0]["cpu_s"]}  # fmt: skip
        stop.set()  # the hostile user to the end of the window, not beyond
        found.append(results.get(timeout=60))
        hostile.join(30)
        others.join(30)
        rss = coordinator.rss_bytes()
    by_kind = {("hostile" if "flood_calls" in r else "others"): r for r in found}
    by_kind["others"].pop("cpu_s")
    p99 = by_kind["others"]["list_jobs"].get("p99_ms", float("inf"))
    submits = by_kind["others"]["submits"]
    return {
        **by_kind["others"],
        "hostile": by_kind["hostile"],
        "coordinator_rss_mb": round(rss / 2**20, 1),
        # CPU seconds a second of the others' run (warm-up and window), of the coordinator and
        # each load process: the machine's 2 cores are shared by the three.
        "cpu_per_s": {name: round(used / elapsed, 2) for name, used in cpu.items()},
        "goal_met": p99 <= 100.0 and submits["refused"] == 0 and submits["ok"] > 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--flooders", type=int, default=32)
    parser.add_argument(
        "--streams-cap", type=int, default=0, help="A limits file's streams per user (0: default)"
    )
    parser.add_argument("--list-every", type=float, default=0.2)
    parser.add_argument("--submit-every", type=float, default=2.0)
    parser.add_argument("--cases", default="limits_on,limits_off")
    parser.add_argument(
        "--trees",
        default="HEAD",
        help="commits whose coordinators run the cases, in turn, in this run (old and new side "
        "by side); a case of another commit is named case@commit",
    )
    parser.add_argument("--no-record", action="store_true")
    options = parser.parse_args()
    cases = {}
    for commit in options.trees.split(","):
        tree = code_tree(commit)
        for name in options.cases.split(","):
            key = name if commit == "HEAD" else f"{name}@{commit}"
            cases[key] = run_case(name, name == "limits_on", options, tree)
            print(json.dumps({key: cases[key]}, indent=1), flush=True)
    emit(
        "hostile_user",
        {
            "goal": GOAL,
            "users": len(OTHERS),
            "hostile_streams": options.streams,
            "hostile_flooders": options.flooders,
            "streams_cap": options.streams_cap or "default",
            "seconds": options.seconds,
            "list_every_s": options.list_every,
            "submit_every_s": options.submit_every,
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
