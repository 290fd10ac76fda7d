"""The scheduler's passes alone, over a real SQLite store: cost per decision at a queue length.

Run by bench/scheduler_scale.py as a script under either code tree (the landed commit's or
the current one: `PYTHONPATH=<tree> python bench/scheduler_passes.py ...`), so both are
measured the same way in the same run. It uses only what both trees have: the store, a
Context, the SchedulerLoop and its `run_once`.

A store with `--queued` jobs (mixed 1-16-system gangs with MemoryX and SwarmX, P1-P3) on a
pool of `--systems`; then, `--passes` times: every job the last pass admitted ends (zero-
duration jobs), and one pass runs, timed. Rows written by a pass are counted from the store:
the versions the jobs' rows gained (every write of a job row bumps it) and the rows added to
the event, placement, replica and attempt tables. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import func, select, text

from appliance.config import Settings
from appliance.domain.errors import InsufficientCapacity
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import Priority, validate_spec
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore, NewJob
from appliance.store.tables import JobRow

SIZES = (1, 1, 2, 2, 4, 4, 8, 16)
# A small model (one MemoryX, little of it), a 1.2B GPT (one MemoryX, 9 GiB) and a 9.7B GPT
# (five MemoryX nodes of 14 GiB each).
MODELS = (
    "model: {name: fc_mnist, hidden_sizes: [64]}\n",
    "model: {name: gpt2, hidden_size: 2048, num_hidden_layers: 24, num_heads: 16, "
    "max_position_embeddings: 1024, vocab_size: 256}\n",
    "model: {name: gpt2, hidden_size: 4096, num_hidden_layers: 48, num_heads: 32, "
    "max_position_embeddings: 2048, vocab_size: 256}\n",
)
COUNTED = ("job_events", "placements", "replicas", "job_attempts")


def mixed_jobs(count: int, pool: list, rng: random.Random) -> list[NewJob]:  # type: ignore[type-arg]
    """`count` jobs of the benchmarks' mix; plans made once per (size, model)."""
    plans = {}
    specs = {}
    for size in set(SIZES):
        for m, params in enumerate(MODELS):
            for priority in (Priority.P1, Priority.P2, Priority.P3):
                spec = validate_spec(
                    params_yaml=params, num_csx=size, num_steps=1, priority=priority
                )
                specs[(size, m, priority)] = spec
                try:
                    plans[(size, m)] = plan_replicas(spec, pool)
                except InsufficientCapacity:  # too large for so few wafers: not in the mix
                    break
    jobs = []
    for i in range(count):
        size, m = rng.choice(SIZES), rng.choice((0, 0, 1, 1, 2))
        while (size, m) not in plans:
            size, m = rng.choice(SIZES), rng.choice((0, 0, 1, 1, 2))
        priority = rng.choice((Priority.P1, Priority.P2, Priority.P2, Priority.P3))
        job_id = f"wsjob-{i:014d}"
        jobs.append(NewJob(job_id, "bench", specs[(size, m, priority)], plans[(size, m)]))
    return jobs


def _written(store: JobStore) -> int:
    with store.engine.connect() as conn:
        total = conn.execute(select(func.coalesce(func.sum(JobRow.version), 0))).scalar() or 0
        for table in COUNTED:
            with contextlib.suppress(Exception):  # a table one tree does not have
                total += conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() or 0
        return int(total)


async def run(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="scheduler-passes-"))
    engine = make_engine(f"sqlite:///{work / 'appliance.db'}")
    migrate(engine)
    store = JobStore(engine)
    settings = Settings(
        data_dir=work / "data",
        systems=args.systems,
        memoryx_nodes=args.memoryx,
        swarmx_nodes=args.swarmx,
    )
    pool = settings.pool()
    store.sync_pool(pool)
    rng = random.Random(args.seed)
    jobs = mixed_jobs(args.queued + args.passes * args.systems, pool, rng)
    now = time.time()
    for start in range(0, len(jobs), 5000):
        store.create_jobs(jobs[start : start + 5000], now)
    writer = ThreadPoolExecutor(1, thread_name_prefix="store")
    ctx = Context(store, JobBus(), writer)
    loop = SchedulerLoop(ctx, settings.scheduler, settings.preemption)
    passes: list[dict[str, float]] = []
    profile = cProfile.Profile() if args.profile else None
    gc.collect()
    gc.freeze()  # the seeded objects are not the scheduler's garbage
    try:
        for index in range(args.passes + 1):
            before = _written(store)
            if profile is not None and index:
                profile.enable()
            started = time.perf_counter()
            admitted = await loop.run_once()
            seconds = time.perf_counter() - started
            if profile is not None:
                profile.disable()
            rows = _written(store) - before
            if index:  # the first pass builds what later ones keep
                passes.append({"seconds": seconds, "admitted": admitted, "rows": rows})
            for job in store.jobs_in([Phase.SCHEDULED]):  # zero-duration: done at once
                await ctx.set_phase(job.id, Phase.CANCELLED, "done")
    finally:
        writer.shutdown(wait=True)
        engine.dispose()
    if profile is not None:
        profile.dump_stats(args.profile)
    seconds = sum(p["seconds"] for p in passes)
    admitted = sum(p["admitted"] for p in passes)
    durations = sorted(p["seconds"] for p in passes)
    rows = sum(p["rows"] for p in passes)
    p99 = durations[min(len(durations) - 1, int(0.99 * len(durations)))]
    return {
        "queued": args.queued,
        "systems": args.systems,
        "passes": len(passes),
        "decisions": admitted,
        "decisions_per_second": round(admitted / seconds, 1) if seconds else None,
        "ms_per_decision": round(1000 * seconds / admitted, 3) if admitted else None,
        "pass_ms_p50": round(1000 * durations[len(durations) // 2], 2),
        "pass_ms_p99": round(1000 * p99, 2),
        "rows_per_decision": round(rows / admitted, 2) if admitted else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--systems", type=int, default=64)
    parser.add_argument("--memoryx", type=int, default=32)
    parser.add_argument("--swarmx", type=int, default=16)
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--profile", help="write the timed passes' cProfile (event loop only)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
