"""LocalBackend against real processes: stop escalation, exit codes, adoption, log tails."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from pathlib import Path

import psutil
import pytest

from appliance.backends.base import Backend, ReplicaEvent, ReplicaEventKind
from appliance.backends.local import LocalBackend
from appliance.domain.job import Job, Replica
from appliance.domain.phases import Phase
from appliance.domain.plan import Role
from appliance.domain.spec import JobSpec
from tests.integration.backends.contract import JOB_ID as CONTRACT_JOB_ID
from tests.integration.backends.contract import BackendContract
from tests.integration.coordinator.harness import wait_until

JOB_ID = "wsjob-backendtest0001"


def _fake_worker(tmp_path: Path, body: str) -> str:
    """A stand-in interpreter: the backend runs `<it> -m appliance.workers <role> ...`."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport signal, sys, time\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _job(names: list[str]) -> tuple[Job, list[Replica]]:
    spec = JobSpec(params_yaml="model: {name: fc_mnist}", num_csx=1, num_steps=1)
    job = Job(id=JOB_ID, user="u", spec=spec, phase=Phase.SCHEDULED, created_at=0, updated_at=0)
    replicas = [Replica(JOB_ID, n, Role.CS2, i, "cs2-01") for i, n in enumerate(names)]
    return job, replicas


def _exec_done(pids: list[int], job_id: str) -> None:
    """Until each replica runs the worker program: a child between fork and exec still shows
    the test's command line, and is not one to adopt (on a loaded machine it can be slow)."""
    wait_until(lambda: all(job_id in " ".join(psutil.Process(p).cmdline()) for p in pids), 10)


async def _next(events: object, kind: ReplicaEventKind) -> ReplicaEvent:
    async for event in events:  # type: ignore[attr-defined]
        if event.kind is kind:
            return event
    raise AssertionError("event stream ended")


async def test_teardown_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    python = _fake_worker(
        tmp_path,
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)",
    )
    backend = LocalBackend(tmp_path, "127.0.0.1:1", grace_seconds=0.5, python=python)
    job, replicas = _job(["cs2-0"])
    await backend.launch(job, replicas)
    events = backend.observe()
    started = await _next(events, ReplicaEventKind.STARTED)
    log = backend.log_path(JOB_ID, "cs2-0")
    # From "ready" on, the stand-in ignores SIGTERM.
    await asyncio.to_thread(wait_until, lambda: "ready" in log.read_text(), 10, "ready")

    await backend.teardown(JOB_ID)
    exited = await asyncio.wait_for(_next(events, ReplicaEventKind.EXITED), 5)
    assert exited.pid == started.pid
    assert (exited.exit_code, exited.message) == (137, "killed by SIGKILL")
    assert not psutil.pid_exists(started.pid) or psutil.Process(started.pid).status() == "zombie"
    assert await backend.log_tail(JOB_ID, "cs2-0", 5) == "ready"
    await backend.close()


async def test_exit_code_and_signal_are_reported(tmp_path: Path) -> None:
    python = _fake_worker(tmp_path, "sys.exit(7)")
    backend = LocalBackend(tmp_path, "127.0.0.1:1", python=python)
    job, replicas = _job(["cs2-0"])
    await backend.launch(job, replicas)
    exited = await asyncio.wait_for(_next(backend.observe(), ReplicaEventKind.EXITED), 10)
    assert (exited.replica, exited.exit_code, exited.message) == ("cs2-0", 7, "")
    assert not list((tmp_path / "jobs" / JOB_ID / "pids").iterdir())
    await backend.close()


async def test_restarted_backend_adopts_live_replicas_and_can_stop_them(tmp_path: Path) -> None:
    python = _fake_worker(tmp_path, "time.sleep(600)")
    first = LocalBackend(tmp_path, "127.0.0.1:1", python=python)
    job, replicas = _job(["cs2-0", "cs2-1"])
    await first.launch(job, replicas)
    pids = first.live_pids(JOB_ID)
    _exec_done(pids, JOB_ID)
    await first.close()  # the coordinator goes away; the replicas stay

    second = LocalBackend(tmp_path, "127.0.0.1:1", python=python, grace_seconds=2)
    assert await second.adopt() == {JOB_ID: {"cs2-0", "cs2-1"}}
    assert sorted(second.live_pids(JOB_ID)) == sorted(pids)
    events = second.observe()
    os.kill(pids[0], signal.SIGKILL)
    exited = await asyncio.wait_for(_next(events, ReplicaEventKind.EXITED), 5)
    assert exited.exit_code is None and "adopted" in exited.message
    await second.teardown(JOB_ID)
    assert second.live_pids(JOB_ID) == []
    await second.close()
    for pid in pids:
        if psutil.pid_exists(pid):
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_a_replica_that_failed_while_nobody_watched_left_its_error_line(
    tmp_path: Path,
) -> None:
    python = _fake_worker(tmp_path, "time.sleep(600)")
    first = LocalBackend(tmp_path, "127.0.0.1:1", python=python)
    job, replicas = _job(["chief-0"])
    await first.launch(job, replicas)
    _exec_done(first.live_pids(JOB_ID), JOB_ID)
    await first.close()  # the coordinator goes away; the replica fails meanwhile, saying why
    pids = tmp_path / "jobs" / JOB_ID / "pids"
    (pids / "chief-0.error").write_text("ValueError: the data set is gone\n")
    (pids / "chief-0.exit").write_text("1\n")

    second = LocalBackend(tmp_path, "127.0.0.1:1", python=python, grace_seconds=0.5)
    await second.adopt()
    assert await second.away_error(JOB_ID, "chief-0") == "ValueError: the data set is gone"
    await second.teardown(JOB_ID)
    await second.close()


async def test_a_replica_gets_only_what_it_needs_of_the_coordinators_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_DATABASE_URL", "postgresql://appliance:s3cret@db/appliance")
    monkeypatch.setenv("CSCTL_TOKEN", "a-users-token")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    python = _fake_worker(
        tmp_path, "import json, os\nprint(json.dumps(dict(os.environ)), flush=True)"
    )
    backend = LocalBackend(tmp_path, "127.0.0.1:1", grace_seconds=0.5, python=python)
    backend.replica_secrets = lambda job_id, attempt: {"APPLIANCE_REPLICA_TOKEN": f"t-{job_id}"}
    job, replicas = _job(["cs2-0"])
    await backend.launch(job, replicas)
    events = backend.observe()
    await asyncio.wait_for(_next(events, ReplicaEventKind.EXITED), 10)
    seen = json.loads(backend.log_path(JOB_ID, "cs2-0").read_text())
    await backend.close()
    assert "APPLIANCE_DATABASE_URL" not in seen and "CSCTL_TOKEN" not in seen
    assert "s3cret" not in json.dumps(seen)
    assert seen["PATH"] == os.environ["PATH"] and seen["LC_ALL"] == "C.UTF-8"
    assert seen["APPLIANCE_JOB_ID"] == JOB_ID and seen["APPLIANCE_REPLICA_TOKEN"] == f"t-{JOB_ID}"


async def test_an_input_worker_runs_the_worker_program_named_by_its_replica(
    tmp_path: Path,
) -> None:
    """What the data plane's `worker` program is started with: its role, its replica name
    (worker-<k>, k its index) and the job's identity, as every replica is."""
    python = _fake_worker(
        tmp_path, "import json, os\nprint(json.dumps([sys.argv, dict(os.environ)]), flush=True)"
    )
    backend = LocalBackend(tmp_path, "127.0.0.1:1", grace_seconds=0.5, python=python)
    job, _ = _job([])
    await backend.launch(job, [Replica(JOB_ID, "worker-3", Role.WORKER, 3, "worker-01")])
    await asyncio.wait_for(_next(backend.observe(), ReplicaEventKind.EXITED), 10)
    argv, env = json.loads(backend.log_path(JOB_ID, "worker-3").read_text())
    await backend.close()
    assert argv[1:6] == ["-m", "appliance.workers", "worker", "--job-id", JOB_ID]
    assert argv[argv.index("--replica") + 1] == "worker-3"
    assert (env["APPLIANCE_JOB_ID"], env["APPLIANCE_REPLICA"]) == (JOB_ID, "worker-3")


class TestLocalBackendContract(BackendContract):
    """The backend contract with stand-in workers: `sys.exit(0)`, or sleeping until stopped."""

    survives_restart = True

    async def backend(self, tmp_path: Path, *, finishing: bool) -> LocalBackend:
        body = "sys.exit(0)" if finishing else "time.sleep(600)"
        return LocalBackend(tmp_path, "127.0.0.1:1", python=_fake_worker(tmp_path, body))

    async def restarted(self, tmp_path: Path) -> LocalBackend:
        return LocalBackend(tmp_path, "127.0.0.1:1", python=str(tmp_path / "fake-python"))

    def settled(self, backend: Backend) -> None:
        assert isinstance(backend, LocalBackend)
        _exec_done(backend.live_pids(CONTRACT_JOB_ID), CONTRACT_JOB_ID)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # The worker's own line, in the file it was given (workers/__main__.py).
        ("path = sys.argv[sys.argv.index('--error-file') + 1]\n"
         "open(path, 'w').write('UnsafePath: /proc/mymodel is not a directory\\x1b[2J\\n')\n"
         "print('the log goes on', flush=True)\nsys.exit(1)",
         "UnsafePath: /proc/mymodel is not a directory\\x1b[2J"),
        # A crash before its handler: the traceback's last line, as Kubernetes falls back to.
        ("print('step 1', flush=True)\nimport no_such_module_here",
         "ModuleNotFoundError: No module named 'no_such_module_here'"),
        # Killed by a signal: its log's last line says nothing of why.
        ("print('step 1', flush=True)\nimport os\nos.kill(os.getpid(), signal.SIGKILL)", ""),
        ("print('x' * 5000, flush=True)\nsys.exit(1)", "x" * 299 + "…"),
    ],
)  # fmt: skip
async def test_a_failed_replica_says_why_in_its_last_error_line(
    tmp_path: Path, body: str, said: str
) -> None:
    backend = LocalBackend(tmp_path, "127.0.0.1:1", python=_fake_worker(tmp_path, body))
    job, replicas = _job(["cs2-0"])
    await backend.launch(job, replicas)
    exited = await asyncio.wait_for(_next(backend.observe(), ReplicaEventKind.EXITED), 20)
    assert exited.last_error == said
    assert not list((tmp_path / "jobs" / JOB_ID / "pids").iterdir())  # the error file too
    await backend.close()
