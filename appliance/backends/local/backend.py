"""Replicas as local subprocesses: `python -m appliance.workers <role> ...`.

Each replica runs in its own session (process group), logs to
<data_dir>/jobs/<job>/logs/<replica>.log and leaves its pid in .../pids/<replica>.pid, so a
restarted coordinator can find (adopt) and stop what is still running. A replica that fails
writes its last error line to .../pids/<replica>.error (else its log's last line says why:
domain/replica_errors.py); its end carries that line. Replicas outlive a
coordinator restart on purpose; they stop themselves when the coordinator stays away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path

from appliance.backends.base import (
    OptionalParts,
    ReplicaEvent,
    ReplicaEventKind,
    no_identity,
    no_secrets,
)
from appliance.domain.arrays import array_environment
from appliance.domain.auth import ATTEMPT_ENV
from appliance.domain.job import Job, Replica
from appliance.domain.replica_errors import MAX_ERROR_READ, error_line, says_why

log = logging.getLogger(__name__)
READ_CHUNK = 1 << 20


class _Running:
    """One live replica process: a child we started, or an adopted one we watch by pidfd."""

    def __init__(self, job_id: str, replica: str, pid: int, attempt: int = 0) -> None:
        self.job_id = job_id
        self.replica = replica
        self.pid = pid
        self.attempt = attempt
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


class LocalBackend(OptionalParts):
    shares_data_dirs = True  # its replicas are processes on this machine

    def __init__(
        self,
        data_dir: Path,
        coordinator_address: str,
        *,
        grace_seconds: float = 5.0,
        orphan_timeout: float = 60.0,
        python: str = sys.executable,
        data_plane: str = "shared-memory",
    ) -> None:
        self.jobs_dir = data_dir / "jobs"
        self.coordinator_address = coordinator_address
        self.replica_secrets: Callable[[str, int], Mapping[str, str]] = no_secrets
        self.replica_identity: Callable[[str, int, str], Mapping[str, str]] = no_identity
        self.grace_seconds = grace_seconds
        self.orphan_timeout = orphan_timeout
        self.python = python
        self.data_plane = data_plane
        self._running: dict[tuple[str, str], _Running] = {}
        self._events: asyncio.Queue[ReplicaEvent] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- paths ----------------------------------------------------------------------------

    def log_path(self, job_id: str, replica: str) -> Path:
        return self.jobs_dir / job_id / "logs" / f"{replica}.log"

    def _pid_path(self, job_id: str, replica: str) -> Path:
        return self.jobs_dir / job_id / "pids" / f"{replica}.pid"

    def _exit_path(self, job_id: str, replica: str) -> Path:
        """Where the worker writes its exit code (absent after SIGKILL)."""
        return self.jobs_dir / job_id / "pids" / f"{replica}.exit"

    def _error_path(self, job_id: str, replica: str) -> Path:
        """Where the worker writes its last error line when it fails."""
        return self.jobs_dir / job_id / "pids" / f"{replica}.error"

    def _last_error(self, job_id: str, replica: str, code: int | None) -> str:
        """The last error line of a replica that ended with `code`: the one it wrote, else its
        log's last line (a crash before its own handler), none when it did not fail by
        itself. Blocking: run in a thread."""
        if not says_why(code):
            return ""
        for path in (self._error_path(job_id, replica), self.log_path(job_id, replica)):
            with contextlib.suppress(OSError), path.open("rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_ERROR_READ))
                line = error_line(f.read(MAX_ERROR_READ).decode(errors="replace"))
                if line:
                    return line
        return ""

    # ---- protocol -------------------------------------------------------------------------

    async def launch(self, job: Job, replicas: Sequence[Replica]) -> None:
        for replica in replicas:
            if (job.id, replica.name) in self._running:
                continue
            await self._start(job.id, replica, job.attempt)

    async def _start(self, job_id: str, replica: Replica, attempt: int) -> None:
        log_path = self.log_path(job_id, replica.name)
        pid_path = self._pid_path(job_id, replica.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        pid_path.parent.mkdir(parents=True, exist_ok=True)
        exit_path = self._exit_path(job_id, replica.name)
        exit_path.unlink(missing_ok=True)
        error_path = self._error_path(job_id, replica.name)
        error_path.unlink(missing_ok=True)
        env = {
            **replica_environment(os.environ),
            "PYTHONUNBUFFERED": "1",
            "APPLIANCE_JOB_ID": job_id,
            "APPLIANCE_REPLICA": replica.name,
            "APPLIANCE_COORDINATOR": self.coordinator_address,
            ATTEMPT_ENV: str(attempt),
            **array_environment(job_id),
        }
        env.update(self.replica_secrets(job_id, attempt))
        env.update(self.replica_identity(job_id, attempt, replica.name))
        command = [
            self.python, "-m", "appliance.workers", replica.role.value,
            "--job-id", job_id, "--replica", replica.name,
            "--coordinator", self.coordinator_address,
            "--orphan-timeout", str(self.orphan_timeout),
            "--data-plane", self.data_plane,
            "--exit-file", str(exit_path), "--error-file", str(error_path),
        ]  # fmt: skip
        with log_path.open("ab") as log_file:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        pid_path.write_text(f"{proc.pid}\n")
        running = _Running(job_id, replica.name, proc.pid, attempt)
        self._running[(job_id, replica.name)] = running
        self._events.put_nowait(
            ReplicaEvent(
                job_id, replica.name, ReplicaEventKind.STARTED, pid=proc.pid, attempt=attempt
            )
        )
        self._spawn(self._wait_child(running, proc))

    async def _wait_child(self, running: _Running, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        message = ""
        if code < 0:
            message = f"killed by {signal.Signals(-code).name}"
            code = 128 - code
        await self._finish(running, code, message)

    async def _finish(self, running: _Running, code: int | None, message: str) -> None:
        job_id, replica = running.job_id, running.replica
        self._running.pop((job_id, replica), None)
        with contextlib.suppress(FileNotFoundError):
            self._pid_path(job_id, replica).unlink()
        if not running.exited.done():
            running.exited.set_result(None)
        error = await asyncio.to_thread(self._last_error, job_id, replica, code)
        self._exit_path(job_id, replica).unlink(missing_ok=True)
        self._error_path(job_id, replica).unlink(missing_ok=True)
        self._events.put_nowait(
            ReplicaEvent(
                job_id, replica, ReplicaEventKind.EXITED, pid=running.pid, exit_code=code,
                message=message, attempt=running.attempt, last_error=error,
            )
        )  # fmt: skip

    async def observe(self) -> AsyncIterator[ReplicaEvent]:
        while True:
            yield await self._events.get()

    async def teardown(self, job_id: str, *, failed: bool = False) -> None:
        """Stop the job's processes (their logs stay under the data dir, failed or not)."""
        victims = [r for (j, _), r in list(self._running.items()) if j == job_id]
        if not victims:
            return
        for r in victims:
            r.signal(signal.SIGTERM)
        _, late = await asyncio.wait([r.exited for r in victims], timeout=self.grace_seconds)
        if late:
            for r in victims:
                if not r.exited.done():
                    log.warning("replica %s/%s ignored SIGTERM; killing", job_id, r.replica)
                    r.signal(signal.SIGKILL)
            await asyncio.wait([r.exited for r in victims], timeout=self.grace_seconds)

    async def adopt(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for pid_path in sorted(self.jobs_dir.glob("*/pids/*.pid")):
            job_id, replica = pid_path.parent.parent.name, pid_path.stem
            if (job_id, replica) in self._running:
                found.setdefault(job_id, set()).add(replica)
                continue
            pid = _read_int(pid_path)
            if pid is None or not _is_our_replica(pid, job_id, replica):
                pid_path.unlink(missing_ok=True)
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                pid_path.unlink(missing_ok=True)
                continue
            running = _Running(job_id, replica, pid, _attempt_of(pid))
            self._running[(job_id, replica)] = running
            self._spawn(self._wait_adopted(running, pidfd))
            found.setdefault(job_id, set()).add(replica)
        return found

    async def _wait_adopted(self, running: _Running, pidfd: int) -> None:
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, on_exit)
        try:
            await gone
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        # Not our child: the exit status is the one the worker wrote, if it could.
        code = _read_int(self._exit_path(running.job_id, running.replica))
        message = "" if code is not None else "killed while adopted (no exit code written)"
        await self._finish(running, code, message)

    def exit_codes(self, job_id: str) -> dict[str, int]:
        """Exit codes left by replicas of the job that ended while nobody watched them."""
        codes = {}
        for path in sorted((self.jobs_dir / job_id / "pids").glob("*.exit")):
            code = _read_int(path)
            if code is not None and (job_id, path.stem) not in self._running:
                codes[path.stem] = code
        return codes

    async def away_error(self, job_id: str, replica: str) -> str:
        code = _read_int(self._exit_path(job_id, replica))
        return await asyncio.to_thread(self._last_error, job_id, replica, code)

    async def log_tail(self, job_id: str, replica: str, lines: int) -> str:
        path = self.log_path(job_id, replica)
        try:
            with path.open("rb") as f:
                f.seek(max(0, path.stat().st_size - 64 * 1024))
                tail = deque(f.read().decode(errors="replace").splitlines(), maxlen=lines)
        except FileNotFoundError:
            return ""
        return "\n".join(tail)

    async def read_log(self, job_id: str, replica: str, offset: int) -> tuple[str, int]:
        try:
            with self.log_path(job_id, replica).open("rb") as f:
                f.seek(offset)
                data = f.read(READ_CHUNK)
        except FileNotFoundError:
            return "", offset
        complete = data[: data.rfind(b"\n") + 1]  # a partial last line waits for its end
        return complete.decode(errors="replace"), offset + len(complete)

    def health(self) -> str | None:
        return None  # local processes need nothing that can be down

    def live_pids(self, job_id: str) -> list[int]:
        return [r.pid for (j, _), r in self._running.items() if j == job_id]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _is_our_replica(pid: int, job_id: str, replica: str) -> bool:
    """Guard against pid reuse: the process must be the worker we started for this replica."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"appliance.workers" in argv and job_id.encode() in argv and replica.encode() in argv


def _attempt_of(pid: int) -> int:
    """The attempt an adopted replica was started for (its environment says), 0 if unknown:
    its exit then says nothing about a later attempt of its job."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()[: 1 << 20].split(b"\0")
    except OSError:
        return 0
    prefix = f"{ATTEMPT_ENV}=".encode()
    value = next((v[len(prefix) :] for v in environ if v.startswith(prefix)), b"")
    return int(value) if value.isdigit() and len(value) < 10 else 0


# What a replica may inherit from the coordinator's environment: how to run Python and find
# files, the locale, and the replica's own knobs. Nothing else (a database URL with its
# password, a tokens file path, a user's CSCTL_TOKEN) leaves the coordinator.
_PASSED = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH",
    "PYTHONHASHSEED", "VIRTUAL_ENV", "APPLIANCE_REPLICA_HOST",
})  # fmt: skip
_PASSED_PREFIXES = ("LC_", "APPLIANCE_STEP_TRACE", "OPENBLAS_", "OMP_", "MKL_", "COVERAGE_")


def replica_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of `environ` a replica is started with."""
    return {
        name: value
        for name, value in environ.items()
        if name in _PASSED or name.startswith(_PASSED_PREFIXES)
    }
