"""Seed a store with a job history: 100,000 jobs, 10,000 of them QUEUED, by bulk inserts.

The history looks like a busy cluster's: 90,000 terminal jobs (70% SUCCEEDED, 20% FAILED,
10% CANCELLED) spread over 30 days, each with its labels, its phase events and (if it ever ran)
its replica rows; 10,000 QUEUED jobs interleaved with the newest 20,000 (so the default list
view cannot just read the tail of the table). Queued jobs ask for 4 CS-2 systems at P3 (lowest
priority), so a benchmark can put systems in maintenance to keep them queued and still let a
fresh P2 job jump the queue.

The seeded store is built once into a template and copied for each benchmark:

    python -m bench.seed [--jobs 100000] [--active 10000] [--force]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

from sqlalchemy import insert

from appliance.config import Settings
from appliance.domain.inventory import default_pool
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import JobSpec, Priority, validate_spec
from appliance.domain.spec_document import stored_document
from appliance.store.engine import make_engine, migrate
from appliance.store.rows import plan_to_json
from appliance.store.tables import JobEventRow, JobLabelRow, JobRow, ReplicaRow
from bench.common import EXAMPLE_PARAMS, WORK, checkpoint, prepare_store, run_in_tree

SEED_VERSION = 2  # 2: the spec document of store revision 0010
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
BATCH = 5000


def template_dir(jobs: int, active: int) -> Path:
    return WORK / f"seed-v{SEED_VERSION}-{jobs}-{active}"


def _job_id(rng: random.Random) -> str:
    return "wsjob-" + "".join(rng.choice(_ALPHABET) for _ in range(14))


def seed(data_dir: Path, jobs: int, active: int, rng_seed: int = 7) -> dict[str, int]:
    rng = random.Random(rng_seed)
    prepare_store(data_dir)
    settings = Settings(data_dir=data_dir)
    engine = make_engine(settings.store.url)
    migrate(engine)
    params_yaml = EXAMPLE_PARAMS.read_text()
    pool = default_pool()
    plans = {
        n: plan_to_json(
            plan_replicas(validate_spec(params_yaml=params_yaml, num_csx=n, num_steps=1000), pool)
        )
        for n in (1, 2, 3, 4)
    }
    now = time.time()
    start = now - 30 * 86400
    created = sorted(rng.uniform(start, now - 60) for _ in range(jobs))
    # QUEUED jobs: `active` of the newest 2*active (or of all, if fewer).
    window = min(jobs, 2 * active)
    queued_idx = set(rng.sample(range(jobs - window, jobs), active))
    counts = {"jobs": 0, "labels": 0, "events": 0, "replicas": 0}
    seen: set[str] = set()
    job_rows: list[dict[str, object]] = []
    label_rows: list[dict[str, object]] = []
    event_rows: list[dict[str, object]] = []
    replica_rows: list[dict[str, object]] = []

    def flush() -> None:
        with engine.begin() as conn:
            for table, rows, key in (
                (JobRow, job_rows, "jobs"),
                (JobLabelRow, label_rows, "labels"),
                (JobEventRow, event_rows, "events"),
                (ReplicaRow, replica_rows, "replicas"),
            ):
                if rows:
                    conn.execute(insert(table.__table__), rows)
                    counts[key] += len(rows)
                    rows.clear()

    for i, t in enumerate(created):
        job_id = _job_id(rng)
        while job_id in seen:
            job_id = _job_id(rng)
        seen.add(job_id)
        user = f"user{rng.randrange(50):02d}"
        labels = {"team": f"team-{rng.randrange(10)}", "seeded": "bench"}
        if i in queued_idx:
            phase, num_csx, priority = "QUEUED", 4, int(Priority.P3)
        else:
            r = rng.random()
            phase = "SUCCEEDED" if r < 0.7 else "FAILED" if r < 0.9 else "CANCELLED"
            num_csx, priority = rng.randint(1, 4), int(Priority.P2)
        # How far a terminal job got before it ended: CANCELLED ones often never ran.
        ran = (
            phase == "SUCCEEDED"
            or (phase == "FAILED" and rng.random() < 0.8)
            or (phase == "CANCELLED" and rng.random() < 0.3)
        )
        path = ["QUEUED"]
        if ran:
            path += ["SCHEDULED", "INITIALIZING", "RUNNING"]
        if phase != "QUEUED":
            path.append(phase)
        times = [t + k * rng.uniform(0.5, 30) for k in range(len(path))]
        finished = times[-1] if phase != "QUEUED" else 0.0
        steps = 1000
        job_rows.append(
            {
                "id": job_id, "user": user, "phase": phase, "priority": priority,
                "spec": stored_document(JobSpec(
                    params_yaml="", num_csx=num_csx, num_steps=steps,
                    model_dir=str(data_dir / "model_dirs" / job_id),
                )),
                "params_yaml": params_yaml, "labels": labels, "plan": plans[num_csx],
                "reason": {"SUCCEEDED": "chief finished all steps",
                           "FAILED": "replica cs2-0 exited with exit code 1",
                           "CANCELLED": "cancelled by user"}.get(phase, ""),
                "pending_reason": (
                    "needs 4 systems, 0 free" if phase == "QUEUED" else ""
                ),
                "systems": ",".join(f"cs2-{k + 1:02d}" for k in range(num_csx)) if ran else "",
                "created_at": t, "updated_at": times[-1],
                "started_at": times[3] if ran else 0.0, "finished_at": finished,
                "progress": (
                    {"step": steps, "num_steps": steps, "loss": 0.1, "steps_per_second": 50.0,
                     "samples_per_second": 3200.0, "reported_at": finished}
                    if phase == "SUCCEEDED" else {}
                ),
            }
        )  # fmt: skip
        label_rows.extend({"job_id": job_id, "key": k, "value": v} for k, v in labels.items())
        event_rows.extend(
            {
                "job_id": job_id, "time": times[k], "from_phase": path[k - 1] if k else None,
                "to_phase": path[k], "reason": f"submitted by {user}" if k == 0 else "seeded",
            }
            for k in range(len(path))
        )  # fmt: skip
        if ran:
            names = [("chief", 0)] + [("cs2", k) for k in range(num_csx)]
            names += [("memoryx", 0), ("swarmx", 0)]
            rphase = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED"}.get(phase, "STOPPED")
            replica_rows.extend(
                {
                    "job_id": job_id, "name": f"{role}-{k}", "role": role, "index": k,
                    "node": f"cs2-{k + 1:02d}" if role == "cs2" else "mgmt", "phase": rphase,
                    "address": "127.0.0.1:0", "pid": 0, "exit_code": 0, "message": "",
                    "log_tail": "",
                }
                for role, k in names
            )  # fmt: skip
        if len(job_rows) >= BATCH:
            flush()
    flush()
    engine.dispose()
    checkpoint(data_dir)
    return counts


def ensure_template(jobs: int = 100_000, active: int = 10_000, force: bool = False) -> Path:
    """The seeded template's data dir, built if missing."""
    path = template_dir(jobs, active)
    done = path / "SEEDED"
    if done.exists() and not force:
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    t0 = time.perf_counter()
    counts = seed(path, jobs, active)
    counts_s = json.dumps({**counts, "seconds": round(time.perf_counter() - t0, 1)})
    done.write_text(counts_s + "\n")
    print(f"seeded {path}: {counts_s}", file=sys.stderr)
    return path


def copy_seeded(dest: Path, jobs: int = 100_000, active: int = 10_000) -> Path:
    """A fresh data dir holding a copy of the seeded store."""
    src = ensure_template(jobs, active)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy2(src / "appliance.db", dest / "appliance.db")
    return dest


def copy_seeded_with(tree: Path | None, dest: Path) -> Path:
    """copy_seeded by the code of `tree` (None: this checkout): a copy of that code's own seeded
    template, in its own schema (a tree from before a schema change cannot start on a store of
    a newer one, and a template's version changes with the schema)."""
    if tree is None:
        return copy_seeded(dest)
    script = (
        "import sys; from pathlib import Path; from bench.seed import copy_seeded;"
        " copy_seeded(Path(sys.argv[1]))"
    )
    run_in_tree(tree, script, str(dest))
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    path = ensure_template(args.jobs, args.active, args.force)
    print(json.dumps({"template": str(path), **json.loads((path / "SEEDED").read_text())}))


if __name__ == "__main__":
    main()
