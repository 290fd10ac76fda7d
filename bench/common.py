"""Shared helpers of the benchmarks: data dirs, the coordinator subprocess, cleanup, results.

Every benchmark runs the coordinator as a separate `appliance serve` process on 127.0.0.1 so
the load generator never shares its GIL, and kills it (and any replica it left) at the end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import update

from appliance.config import Settings
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore
from appliance.store.tables import NodeRow

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS = BENCH_DIR / "results.json"
EXAMPLE_PARAMS = ROOT / "examples" / "params_fc_mnist.yaml"
WORK = Path(os.environ.get("BENCH_WORK", tempfile.gettempdir())) / "appliance-bench"
APPLIANCE = Path(sys.executable).parent / "appliance"
SYSTEMS = ("cs2-01", "cs2-02", "cs2-03", "cs2-04")


def fresh_dir(name: str) -> Path:
    path = WORK / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def prepare_store(data_dir: Path, maintenance: Sequence[str] = ()) -> None:
    """Create (or migrate) the store of `data_dir`, sync the default pool, and put `maintenance`
    systems in maintenance (sync_pool keeps admin-set states, so the coordinator keeps them)."""
    settings = Settings(data_dir=data_dir)
    engine = make_engine(settings.store.url)
    try:
        migrate(engine)
        JobStore(engine).sync_pool(settings.pool())
        with engine.begin() as conn:
            conn.execute(update(NodeRow).values(state="ok"))
            if maintenance:
                conn.execute(
                    update(NodeRow)
                    .where(NodeRow.name.in_(list(maintenance)))
                    .values(state="maintenance")
                )
    finally:
        engine.dispose()
    checkpoint(data_dir)


def prepare_store_with(tree: Path | None, data_dir: Path, maintenance: Sequence[str]) -> None:
    """prepare_store by the code of `tree` (None: this checkout): its migrations, so that code
    can start on the store (a tree from before a migration cannot start on a newer schema)."""
    if tree is None:
        prepare_store(data_dir, maintenance=maintenance)
        return
    script = (
        "import json, sys; from pathlib import Path; from bench.common import prepare_store;"
        " prepare_store(Path(sys.argv[1]), maintenance=json.loads(sys.argv[2]))"
    )
    run_in_tree(tree, script, str(data_dir), json.dumps(list(maintenance)))


def run_in_tree(tree: Path, script: str, *args: str) -> None:
    """`python -c script args` under the code of `tree` (a commit's `git archive`), not this
    checkout's (-P: the tree's code first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-P", "-c", script, *args], env=env, check=True)


def checkpoint(data_dir: Path) -> None:
    """Fold the WAL into the database file, so a copy of appliance.db alone is complete."""
    conn = sqlite3.connect(data_dir / "appliance.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def phase_counts(data_dir: Path) -> dict[str, int]:
    """Jobs per phase in the SQLite store of `data_dir` (read once the coordinator stopped)."""
    db = sqlite3.connect(data_dir / "appliance.db")
    try:
        return dict(db.execute("SELECT phase, count(*) FROM jobs GROUP BY phase").fetchall())
    finally:
        db.close()


def code_tree(commit: str) -> Path | None:
    """The code of `commit`, unpacked once from git with no worktree left behind (None for
    HEAD: this checkout)."""
    if commit == "HEAD":
        return None
    tree = WORK / f"landed-{commit}"
    if not (tree / "appliance").is_dir():
        data = subprocess.run(
            ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True
        )
        with tarfile.open(fileobj=io.BytesIO(data.stdout)) as archive:
            archive.extractall(tree, filter="data")
    return tree


def commit_tree(ref: str) -> tuple[str, Path | None]:
    """`ref` as a short hash and its code unpacked (code_tree), so that uncommitted changes in
    this checkout stay out of the measurement."""
    done = subprocess.run(["git", "rev-parse", "--short", "--verify", f"{ref}^{{commit}}"],
                          cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    commit = done.stdout.strip()
    return commit, code_tree(commit)


_TREE_MAIN = (
    "import sys; from appliance.cli import main; main(sys.argv[1:], prog_name='appliance')"
)


# The coordinators the benchmarks start serve plaintext on loopback, as every figure recorded
# before TLS (#36) was measured and as their raw gRPC and HTTP clients dial. What TLS costs is
# measured on its own (bench.data_plane_tls); extra_env={"APPLIANCE_INSECURE": "false"} (and a
# client that pins the CA) measures a benchmark with it.
PLAINTEXT = {"APPLIANCE_INSECURE": "true"}

# Per-user limits (#36) stay on in the benchmarks' coordinators (each call still finds its
# user's caps and counts its streams; an unlimited rate takes no token), but their callers are
# lifted as an admin lifts a CI bot: a benchmark that submits 1,500 jobs from one user measures
# the coordinator, not the default caps (bench.hostile_user measures the caps, with its own
# file).
LIFTED = "defaults: {streams: unlimited, requests_per_second: unlimited, queued_jobs: unlimited}\n"


class CoordinatorProcess:
    """`appliance serve` on free ports; `address` is parsed from its first stdout line."""

    def __init__(
        self,
        data_dir: Path,
        *,
        extra_env: dict[str, str] | None = None,
        profile: Path | None = None,
        ports: tuple[int, int] = (0, 0),
        log_name: str = "coordinator.log",
        tree: Path | None = None,
    ) -> None:
        """`ports`: gRPC and HTTP (0: free ones); `log_name`: its stderr, in the data dir;
        `tree`: run the coordinator of another code tree (one unpacked by `git archive`)."""
        self.data_dir = data_dir
        self.log_path = data_dir / log_name
        # Under cProfile the drain is slower and the stats of every thread are merged and
        # written at the end: a stop must wait for that, or the profile is lost.
        self._stop_grace = 10.0 if profile is None else 120.0
        lifted = data_dir / "bench-limits.yaml"
        lifted.write_text(LIFTED)
        env = {
            **os.environ,
            **PLAINTEXT,
            "APPLIANCE_LIMITS_FILE": str(lifted),
            **(extra_env or {}),
        }
        self._log = self.log_path.open("ab")
        self.started = time.perf_counter()
        grpc_port, http_port = (str(p) for p in ports)
        serve = ["serve", "--data-dir", str(data_dir), "--grpc-port", grpc_port,
                 "--http-port", http_port]  # fmt: skip
        if tree is not None:
            # -P: with `-c`, Python would put the working directory (this checkout) on the
            # path ahead of PYTHONPATH, and run this checkout's code instead of the tree's.
            env["PYTHONPATH"] = str(tree)
            command = [sys.executable, "-P", "-c", _TREE_MAIN, *serve]
        elif profile is None:
            command = [str(APPLIANCE), *serve]
        else:
            command = [sys.executable, "-m", "bench._profiled_serve", str(profile), *serve]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )  # fmt: skip
        self.address = ""
        self.ready_after = 0.0

    def wait_address(self, timeout: float = 60.0) -> str:
        """Block until the address line is printed (the servers are listening by then)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), True)
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"coordinator exited early; see {self.log_path}")
            if line.startswith("appliance "):
                self.address = line.split()[1]
                self.ready_after = time.perf_counter() - self.started
                return self.address
        raise TimeoutError("coordinator did not print its address")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the coordinator has used so far, every thread's (ended
        ones included)."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) per thread of the coordinator ("name/tid"; the main
        thread, which runs the asyncio event loop, is "main")."""
        totals: dict[str, float] = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                name = (task / "comm").read_text().strip() + "/" + task.name
                if task.name == str(self.proc.pid):
                    name = "main"
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                ticks = int(fields[11]) + int(fields[12])  # utime + stime
                totals[name] = totals.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
        return totals

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (graceful drain), SIGKILL after `timeout` (None: 10 s, 120 s profiled);
        then kill leftover replicas."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self._stop_grace if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        kill_workers(self.data_dir)

    def __enter__(self) -> CoordinatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def worker_pids(marker: str) -> list[int]:
    """Pids of `appliance.workers` processes whose command line contains `marker`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if "appliance.workers" in cmd and any(marker in part for part in cmd):
            found.append(proc.info["pid"])
    return found


def pids_with(marker: str) -> list[int]:
    """Pids of any process whose command line contains `marker` (the cancel check)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if any(marker in part for part in cmd) and proc.info["pid"] != os.getpid():
            found.append(proc.info["pid"])
    return found


def kill_workers(data_dir: Path) -> int:
    """Kill replicas started for jobs under `data_dir` (their pidfiles name them)."""
    killed = 0
    for pid_file in data_dir.glob("jobs/*/pids/*.pid"):
        with contextlib.suppress(ValueError, OSError, psutil.Error):
            pid = int(pid_file.read_text().strip())
            job_id = pid_file.parent.parent.name
            cmd = psutil.Process(pid).cmdline()
            if "appliance.workers" in cmd and job_id in cmd:
                os.killpg(pid, signal.SIGKILL)
                killed += 1
    return killed


def cpu_ms_per_job(
    before: dict[str, float], after: dict[str, float], jobs: int
) -> dict[str, float]:
    """The coordinator's CPU ms per job done, by thread name (tids folded; `main` runs the
    event loop), busiest first: the figure a loaded machine moves least."""
    by_name: dict[str, float] = {}
    for thread, seconds in after.items():
        name = thread.split("/")[0]
        by_name[name] = by_name.get(name, 0.0) + seconds - before.get(thread, 0.0)
    per_job = {name: round(1000 * s / max(jobs, 1), 2) for name, s in by_name.items() if s > 0}
    total = round(1000 * sum(by_name.values()) / max(jobs, 1), 2)
    return {"all": total, **dict(sorted(per_job.items(), key=lambda item: -item[1]))}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil(q/100 * n)
    return ordered[min(rank, len(ordered)) - 1]


def median_run(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose `key` is the median of the runs' (the lower one of an even count)."""
    return sorted(runs, key=lambda run: run[key])[(len(runs) - 1) // 2]


def summarize_ms(values_s: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": model,
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": dirty,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def record(name: str, result: dict[str, Any], command: str) -> None:
    """Merge one benchmark's result into bench/results.json (keyed by benchmark name)."""
    data: dict[str, Any] = {}
    if RESULTS.exists():
        with contextlib.suppress(ValueError):
            data = json.loads(RESULTS.read_text())
    data.setdefault("benchmarks", {})[name] = {
        "command": command,
        "machine": machine(),
        **result,
    }
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def emit(name: str, result: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    command = "python -m bench." + Path(argv[0]).stem + "".join(" " + a for a in argv[1:])
    print(json.dumps({"benchmark": name, **result}, indent=2))
    if "--no-record" not in argv:
        record(name, result, command)


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[float]:
    """A deadline (monotonic) for loops that must stop in time."""
    yield time.monotonic() + seconds
