"""However a job's replica ends, nothing of its shared memory outlives the job.

For each role, a running job loses one replica of it to SIGKILL at a random step; the rest
end (the chief on its peer's failure, the others when the coordinator says stop, as it does
for a failed job). Then no replica process is left, nothing new is under /dev/shm, no socket of
the job is in /proc/net/unix, and no process on the host holds a descriptor or a mapping of any
ring the job had. The random choices come from APPLIANCE_KILL_SEED (printed, so that a failure
can be replayed), else from the clock.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.domain.restarts import EXIT_PEER_FAILED
from tests.integration.shared_memory_checks import (
    abstract_sockets,
    dev_shm,
    holders,
    rings_of,
    socket_names,
)
from tests.integration.test_workers import RunningJob, run_job
from tests.integration.test_workers_input import digits_params
from tests.model_specs import FC, SGD, with_

SEED = int(os.environ.get("APPLIANCE_KILL_SEED") or time.time_ns() % 1_000_000)


async def reach_step(job: RunningJob, step: int, replay: str) -> None:
    """Wait until the chief reports `step`; fail at once (with the logs) if it ends first."""
    reached = asyncio.create_task(
        job.fake.wait_until(lambda: any(p.step >= step for p in job.fake.progress), within=120)
    )
    ended = asyncio.create_task(job.processes["chief-0"].wait())
    try:
        await asyncio.wait({reached, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
    if not reached.done():
        reached.cancel()
        await asyncio.gather(reached, return_exceptions=True)
        pytest.fail(f"the job ended before step {step} {replay}\n{job.logs()}")
    await reached  # its TimeoutError, if the job stalled


ROLES = [
    "cs2",
    "memoryx",
    "chief",
    pytest.param("swarmx", marks=pytest.mark.slow),
    pytest.param("worker", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("role", ROLES)
async def test_a_replica_killed_at_random_leaves_no_shared_memory(
    tmp_path: Path, role: str
) -> None:
    rng = random.Random(f"{SEED}-{role}")
    params: dict[str, Any] = (
        digits_params(tmp_path / "digits") if role == "worker" else with_(FC, optimizer=SGD)
    )
    before = dev_shm()
    async with run_job(tmp_path, 2, 2, 1, 1_000_000, params) as job:
        victim = rng.choice(sorted(name for name in job.processes if name.startswith(role)))
        at_step = rng.randrange(1, 40)
        print(f"APPLIANCE_KILL_SEED={SEED}: SIGKILL {victim} once step {at_step} is reported")
        replay = f"(APPLIANCE_KILL_SEED={SEED}: {victim} at step {at_step})"
        await reach_step(job, at_step, replay)
        pids = {name: process.pid for name, process in job.processes.items()}
        inodes = rings_of(pids.values())
        assert rings_of([pids[victim]]), f"{victim} holds no ring: nothing to test {replay}"
        job.processes[victim].send_signal(signal.SIGKILL)
        await job.exit_code(victim, within=10)
        if victim != "chief-0":
            assert await job.exit_code("chief-0", within=30) == EXIT_PEER_FAILED, job.logs()
        job.fake.keep_running = False  # what the coordinator tells a failed job's replicas
        for name in job.processes:
            await job.exit_code(name, within=30)

    sockets = set(socket_names(pids).values())
    assert not sockets & abstract_sockets(), replay
    assert not holders(inodes), replay
    assert not dev_shm() - before, replay
