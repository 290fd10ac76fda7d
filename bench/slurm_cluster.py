"""A throwaway local Slurm for the benchmarks, driven through its own commands.

`LocalSlurm` starts munged, slurmctld and a few `slurmd -N nodeK` with bench/slurm/up.sh (all
on 127.0.0.1, all state under WORK/slurm), stops them with bench/slurm/down.sh (pid files),
and times what a user of Slurm would do: `sbatch` many times, `scancel -u $USER`, `squeue`.
Every command gets SLURM_CONF in its environment; nothing in /etc is read or written.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from typing import Any

from bench.common import BENCH_DIR, WORK

SCRIPTS = BENCH_DIR / "slurm"
SBATCH = ["sbatch", "--parsable", "--output=/dev/null", "--wrap=true"]
PENDING_MODES = ("drain", "hold")


class LocalSlurm:
    """One local Slurm, up between `up()` and `down()`.

    `pending`: how submitted jobs are kept from starting. "drain": every node is drained
    (`scontrol update ... State=DRAIN`), so the scheduler still considers each job and leaves
    it pending with reason ReqNodeNotAvail, like the appliance's CS-2 systems in maintenance;
    "hold": `sbatch --hold` (reason JobHeldUser), which the scheduler skips.
    """

    def __init__(self, nodes: int = 4, pending: str = "drain", port: int = 16817) -> None:
        if pending not in PENDING_MODES:
            raise ValueError(f"pending must be one of {PENDING_MODES}")
        self.nodes = nodes
        self.pending = pending
        self.port = port
        self.dir = WORK / "slurm"
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}
        self._script_env = {
            **os.environ,
            "SLURM_BENCH_DIR": str(self.dir),
            "SLURM_BENCH_NODES": str(nodes),
            "SLURM_BENCH_PORT": str(port),
        }

    def up(self) -> None:
        """A fresh Slurm (up.sh removes what a previous one left), its nodes drained if asked."""
        self._script("down.sh")
        self._script("up.sh")
        if self.pending == "drain":
            self._run("scontrol", "update", f"NodeName=node[1-{self.nodes}]", "State=DRAIN",
                      "Reason=benchmark: keep jobs pending")  # fmt: skip

    def down(self) -> None:
        self._script("down.sh")

    def version(self) -> str:
        return self._run("sbatch", "--version").strip()

    def settings(self) -> dict[str, str]:
        """The slurm.conf lines that matter for throughput, as written by up.sh."""
        keys = ("SchedulerType", "SchedulerParameters", "SlurmctldPort", "MaxJobCount",
                "MinJobAge", "PriorityType", "AccountingStorageType", "JobAcctGatherType",
                "SlurmctldDebug", "MessageTimeout", "CommunicationParameters")  # fmt: skip
        found = {}
        for line in (self.dir / "slurm.conf").read_text().splitlines():
            key, _, value = line.partition("=")
            if key in keys:
                found[key] = value
        return found

    def submit(self, jobs: int, parallel: int) -> dict[str, Any]:
        """`jobs` sbatch commands, `parallel` at a time (xargs -P: no shell per job); the rate
        counts the job ids printed, each one acknowledged by slurmctld."""
        command = ["xargs", "-P", str(parallel), "-I{}", *SBATCH, "--job-name=bench-{}"]
        if self.pending == "hold":
            command.append("--hold")
        lines = "".join(f"{i}\n" for i in range(jobs))
        start = time.perf_counter()
        done = subprocess.run(command, input=lines, capture_output=True, text=True,
                              env=self.env, cwd=self.dir)  # fmt: skip
        elapsed = time.perf_counter() - start
        acked = sum(1 for line in done.stdout.split() if line.isdigit())
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        return {
            "jobs": jobs,
            "parallel": parallel,
            "elapsed_s": round(elapsed, 3),
            "acked": acked,
            "acked_per_s": round(acked / elapsed, 1),
            "errors": len(errors),
            "first_error": errors[0] if errors else "",
        }

    def cancel_mine(self, time_limit: float = 300.0) -> dict[str, Any]:
        """`scancel -u $USER`, timed until squeue shows none of the user's jobs pending
        (squeue is polled only after scancel returned, so the polling never competes)."""
        before = self.pending_count()
        start = time.perf_counter()
        self._run("scancel", "-u", self.user)
        returned = time.perf_counter() - start
        deadline = time.monotonic() + time_limit
        left = self.pending_count()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.pending_count()
        elapsed = time.perf_counter() - start
        return {
            "pending_before": before,
            "scancel_returned_s": round(returned, 3),
            "elapsed_s": round(elapsed, 3),
            "left_pending": left,
            "cancelled_per_s": round((before - left) / elapsed, 1),
        }

    def pending_count(self) -> int:
        out = self._run("squeue", "-h", "-u", self.user, "-t", "PENDING", "-o", "%i")
        return len(out.split())

    def pending_reason(self) -> str:
        out = self._run("squeue", "-h", "-u", self.user, "-t", "PENDING", "-o", "%r")
        return out.splitlines()[0].strip() if out.strip() else ""

    def _run(self, *command: str) -> str:
        done = subprocess.run(command, capture_output=True, text=True, env=self.env, check=True)
        return done.stdout

    def _script(self, name: str) -> None:
        subprocess.run([str(SCRIPTS / name)], env=self._script_env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
