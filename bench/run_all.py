"""Run every benchmark one after another (each in its own process), then write the table.

python -m bench.run_all            # all six goals, ~7 minutes on 2 cores
python -m bench.run_all --table    # only rewrite the table in bench/README.md from results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from bench.common import BENCH_DIR, RESULTS, ROOT

# failover starts a throwaway PostgreSQL server (tests/postgres.py: needs its binaries).
BENCHMARKS = ["submit_throughput", "list_jobs", "job_latency", "rss", "restart", "failover"]
TABLE_START = "<!-- results-table:start -->"
TABLE_END = "<!-- results-table:end -->"


def rows(data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    b = data.get("benchmarks", {})
    out: list[tuple[str, str, str, str]] = []

    def ok(flag: object) -> str:
        return "met" if flag else "**missed**"

    if s := b.get("submit_throughput"):
        out.append((
            f"1. Submit throughput, {s['clients']} gRPC clients, SQLite",
            ">= 500 jobs/s persisted",
            f"{s['persisted_queued_per_s']} jobs/s ({s['persisted_by_phase'].get('QUEUED', 0)}"
            f" QUEUED in {s['elapsed_s']} s; submit p99 {s['latency']['p99_ms']} ms)"
            + "".join(f"; {tree}: {run['persisted_queued_per_s']} jobs/s"
                      for tree, run in list(s.get("trees", {}).items())[:-1]),
            ok(s["met"]),
        ))  # fmt: skip
    if s := b.get("list_jobs"):
        d, a, st, sa = (
            s["list_default"],
            s["list_all_active_one_call"],
            s["stream_active"],
            s["stream_all"],
        )
        out.append((
            "2a. ListJobs default view (active, server limit "
            f"{d['server_default_limit']}), 100k jobs / 10k active",
            "p99 <= 100 ms",
            f"p50 {d['p50_ms']} ms, p99 {d['p99_ms']} ms ({d['jobs_returned']} jobs a call)",
            ok(d["met"]),
        ))  # fmt: skip
        out.append((
            "2b. All 10,000 active jobs (ListJobs limit=10000 / StreamJobs)",
            "(no goal; reported)",
            f"one call p50 {a['p50_ms']} ms, p99 {a['p99_ms']} ms; "
            f"stream p50 {st['p50_ms']} ms",
            "-",
        ))  # fmt: skip
        out.append((
            "2c. StreamJobs(all=True), 100,000 jobs",
            "<= 1 s",
            f"median {sa['median_s']} s (runs {', '.join(map(str, sa['runs_s']))})",
            ok(sa["met"]),
        ))  # fmt: skip
        for case, cold in s.get("stream_all_cold", {}).items():
            goal = cold["met"] is not None  # first_start (never served before): reported
            after = "a restart" if goal else "a start on a store never served before"
            out.append((
                f"2d. StreamJobs(all=True), 100,000 jobs, first after {after} ({case})",
                "<= 1 s" if goal else "(no goal; reported)",
                f"median {cold['median_s']} s (runs {', '.join(map(str, cold['runs_s']))})",
                ok(cold["met"]) if goal else "-",
            ))  # fmt: skip
    if s := b.get("job_latency"):
        r, c = s["submit_to_running"], s["cancel_to_gone"]
        out.append((
            f"3a. Submit -> RUNNING, 1 CS-2, local backend ({s['jobs']} jobs)",
            "p99 <= 5 s",
            f"p50 {r['p50_ms'] / 1000:.2f} s, p99 {r['p99_ms'] / 1000:.2f} s",
            ok(r["met"]),
        ))  # fmt: skip
        out.append((
            "3b. Cancel running job -> replica processes gone",
            "p99 <= 1 s",
            f"p50 {c['p50_ms'] / 1000:.2f} s, p99 {c['p99_ms'] / 1000:.2f} s",
            ok(c["met"]),
        ))  # fmt: skip
    if s := b.get("rss"):
        out.append((
            "4. Coordinator RSS, 100k jobs, after stream-all + 10k list + 200 GetJob",
            "<= 470 MB",
            f"{s['rss_mb']} MB (peak {s['peak_rss_mb']} MB; {s['rss_after_start_mb']} MB idle)",
            ok(s["met"]),
        ))  # fmt: skip
        if q := s.get("queued_100k"):
            out.append((
                "4b. Coordinator RSS, 100k jobs all QUEUED, the same calls",
                "<= 470 MB",
                f"{q['rss_mb']} MB (peak {q['peak_rss_mb']} MB; "
                f"{q['rss_after_start_mb']} MB idle)",
                ok(q["met"]),
            ))  # fmt: skip
    if s := b.get("restart"):
        out.append((
            "5. Restart on 100k jobs (10k queued) -> fresh job SCHEDULED",
            "<= 5 s",
            f"median {s['scheduled_s_median']} s, max {s['scheduled_s_max']} s",
            ok(s["met"]),
        ))  # fmt: skip
    if s := b.get("failover"):
        out.append((
            "6. kill -9 of the leading coordinator (2, PostgreSQL) -> new job SCHEDULED",
            "<= 15 s",
            f"median {s['median_s']} s, worst {s['worst_s']} s ({s['runs']} runs)",
            ok(s["met"]),
        ))  # fmt: skip
    return out


def write_table() -> str:
    data = json.loads(RESULTS.read_text())
    measured = [data["benchmarks"][n] for n in BENCHMARKS if n in data["benchmarks"]]
    first = measured[0]["machine"]
    lines = [f"Measured on {_machine(first)}."]
    # A benchmark measured elsewhere or at another commit says so (the table mixes runs).
    for name in BENCHMARKS:
        m = data["benchmarks"].get(name, {}).get("machine")
        if m and (m["cpu_model"], m["git_commit"]) != (first["cpu_model"], first["git_commit"]):
            code = data["benchmarks"][name].get("coordinator_code", "this checkout")
            ran = "" if code == "this checkout" else f"; the coordinator's code: {code}"
            lines.append(f"`{name}` measured on {_machine(m)}{ran}.")
    lines += [
        "",
        "| Goal | Target | Measured | |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(data)),
    ]
    table = "\n".join(lines)
    readme = BENCH_DIR / "README.md"
    text = readme.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    readme.write_text(text[:start] + "\n" + table + "\n" + text[end:])
    return table


def _machine(m: dict[str, Any]) -> str:
    dirty = " (+ uncommitted changes)" if m["git_dirty"] else ""
    return (
        f"{m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu_model']}, Python {m['python']}, "
        f"commit {m['git_commit']}{dirty}, {m['date']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if not args.table:
        subprocess.run([sys.executable, "-m", "bench.seed"], cwd=ROOT, check=True)
        for name in BENCHMARKS:
            print(f"== {name}", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=ROOT, check=False,
                           timeout=300)  # fmt: skip
    print(write_table())


if __name__ == "__main__":
    main()
