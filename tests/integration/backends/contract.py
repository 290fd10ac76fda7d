"""What every backend must do, as one abstract suite: a subclass per backend makes its
backends (replicas that end by themselves with exit 0, or that run until stopped) and says
whether its replicas outlive a coordinator restart; the tests are the same for all.

- launch: one STARTED event per replica, of the job's attempt (it may come after `launch`
  returns: a pod starts once a node runs it);
- replicas that end by themselves: one EXITED event each, exit code 0;
- teardown: every replica still running ends with 143 (SIGTERM); a second one does nothing;
- launching what runs already starts nothing more; `adopt` on the backend that runs them
  reports them and takes none of their events away;
- after a restart, `adopt` finds every replica still running (and can stop it), or none when
  replicas die with the coordinator; either way nothing ended unwatched is made up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from appliance.backends.base import Backend, ReplicaEvent, ReplicaEventKind
from appliance.domain.job import Job, Replica
from appliance.domain.phases import Phase
from appliance.domain.plan import Role
from appliance.domain.spec import JobSpec

JOB_ID = "wsjob-contract000001"
# Input workers are replicas like the others: started, ended, torn down and adopted alike.
NAMES = ("chief-0", "cs2-0", "cs2-1", "worker-0", "worker-1")
EVENT_TIMEOUT = 10.0
DATA_SET_PARAMS = "model: {name: fc_mnist}\ntrain_input: {data_dir: /data/contract}\n"


def contract_job(attempt: int = 1) -> tuple[Job, list[Replica]]:
    """A job of a chief, two CS-2s and their two input workers (it reads a data set),
    scheduled for `attempt`."""
    spec = JobSpec(params_yaml=DATA_SET_PARAMS, num_csx=2, num_steps=10)
    job = Job(
        id=JOB_ID, user="u", spec=spec, phase=Phase.SCHEDULED, created_at=0, updated_at=0,
        attempt=attempt,
    )  # fmt: skip
    replicas = [
        Replica(JOB_ID, name, Role(name.split("-")[0]), int(name.split("-")[1]), f"node-{i}")
        for i, name in enumerate(NAMES)
    ]
    return job, replicas


async def collect(
    events: AsyncIterator[ReplicaEvent], kind: ReplicaEventKind, count: int
) -> list[ReplicaEvent]:
    """The next `count` events of `kind`, in order (others skipped)."""
    return [e for e in await read_until(events, kind, count) if e.kind is kind]


async def read_until(
    events: AsyncIterator[ReplicaEvent], kind: ReplicaEventKind, count: int
) -> list[ReplicaEvent]:
    """Every event up to and with the `count`-th of `kind`."""
    found: list[ReplicaEvent] = []
    if count == 0:
        return found

    async def gather() -> None:
        seen = 0
        async for event in events:
            found.append(event)
            seen += event.kind is kind
            if seen == count:
                return

    await asyncio.wait_for(gather(), EVENT_TIMEOUT)
    return found


class BackendContract:
    """Subclass as `Test<Name>BackendContract`; pytest runs these tests for each."""

    # Whether replicas outlive their coordinator (and a restarted one adopts them).
    survives_restart: bool

    async def backend(self, tmp_path: Path, *, finishing: bool) -> Backend:
        """A backend on `tmp_path` whose replicas end by themselves with exit 0 (`finishing`),
        or run until stopped (made in the test's event loop: it may connect to an API)."""
        raise NotImplementedError

    async def restarted(self, tmp_path: Path) -> Backend:
        """A backend as a coordinator restarted on `tmp_path` makes it."""
        raise NotImplementedError

    def settled(self, backend: Backend) -> None:
        """Return once the started replicas are what a restarted backend would find (a local
        process is not its worker until it has exec'd it); nothing to wait for by default."""

    async def test_launch_starts_every_replica_of_the_attempt(self, tmp_path: Path) -> None:
        backend = await self.backend(tmp_path, finishing=False)
        job, replicas = contract_job(attempt=3)
        try:
            await backend.launch(job, replicas)
            started = await collect(backend.observe(), ReplicaEventKind.STARTED, len(NAMES))
            assert sorted(e.replica for e in started) == sorted(NAMES)
            assert {(e.job_id, e.attempt) for e in started} == {(JOB_ID, 3)}
        finally:
            await backend.teardown(JOB_ID)
            await backend.close()

    async def test_replicas_that_finish_exit_0(self, tmp_path: Path) -> None:
        backend = await self.backend(tmp_path, finishing=True)
        job, replicas = contract_job()
        try:
            await backend.launch(job, replicas)
            exited = await collect(backend.observe(), ReplicaEventKind.EXITED, len(NAMES))
            assert sorted((e.replica, e.exit_code) for e in exited) == [(n, 0) for n in NAMES]
            assert {e.attempt for e in exited} == {1}
            assert isinstance(await backend.log_tail(JOB_ID, "chief-0", 5), str)
        finally:
            await backend.close()

    async def test_teardown_ends_running_replicas_with_sigterm(self, tmp_path: Path) -> None:
        backend = await self.backend(tmp_path, finishing=False)
        job, replicas = contract_job()
        events = backend.observe()
        try:
            await backend.launch(job, replicas)
            await collect(events, ReplicaEventKind.STARTED, len(NAMES))
            await backend.teardown(JOB_ID)
            exited = await collect(events, ReplicaEventKind.EXITED, len(NAMES))
            assert sorted((e.replica, e.exit_code) for e in exited) == [(n, 143) for n in NAMES]
            await backend.teardown(JOB_ID)  # nothing left: nothing happens
            assert await backend.adopt() == {}
        finally:
            await backend.close()

    async def test_launching_what_runs_starts_nothing_more(self, tmp_path: Path) -> None:
        backend = await self.backend(tmp_path, finishing=False)
        job, replicas = contract_job()
        events = backend.observe()
        try:
            await backend.launch(job, replicas)
            await backend.launch(job, replicas)
            assert await backend.adopt() == {JOB_ID: set(NAMES)}
            # Each replica starts (a pod may do so after `launch` returns); a second STARTED of
            # one in place of another's fails below.
            started = await collect(events, ReplicaEventKind.STARTED, len(NAMES))
            await backend.teardown(JOB_ID)
            # A replica's STARTED comes before its EXITED: a second one would be in by now.
            seen = await read_until(events, ReplicaEventKind.EXITED, len(NAMES))
            started += [e for e in seen if e.kind is ReplicaEventKind.STARTED]
            assert sorted(e.replica for e in started) == sorted(NAMES)
        finally:
            await backend.close()

    async def test_a_restarted_backend_adopts_what_still_runs(self, tmp_path: Path) -> None:
        first = await self.backend(tmp_path, finishing=False)
        job, replicas = contract_job()
        await first.launch(job, replicas)
        await collect(first.observe(), ReplicaEventKind.STARTED, len(NAMES))
        self.settled(first)
        await first.close()  # the coordinator goes away

        second = await self.restarted(tmp_path)
        try:
            adopted = await second.adopt()
            assert adopted == ({JOB_ID: set(NAMES)} if self.survives_restart else {})
            assert second.exit_codes(JOB_ID) == {}
            events = second.observe()
            await second.teardown(JOB_ID)
            exited = await collect(events, ReplicaEventKind.EXITED, len(adopted.get(JOB_ID, ())))
            assert sorted(e.replica for e in exited) == sorted(adopted.get(JOB_ID, ()))
        finally:
            await second.close()
