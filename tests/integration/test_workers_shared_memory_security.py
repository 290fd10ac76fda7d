"""Only the job's own replicas reach its shared memory: a hostile local user, and a process of
the same user holding another job's (or attempt's) token, try every way in while a real job
runs, and get nothing; the job trains on, to the bits of a run nobody attacked.

The hostile user is `nobody` (uid/gid 65534, no groups): hostile_probe.py run with the
privileges dropped, so these tests need root (CI runs them as root) and are skipped otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from appliance._proto.v1 import control_pb2
from appliance.workers.transport import local_link
from appliance.workers.transport.channels import local_address
from appliance.workers.transport.local_link import REFUSAL, LinkClosed
from tests.integration.shared_memory_checks import (
    abstract_sockets,
    dev_shm,
    holders,
    rings_held,
    rings_of,
    socket_names,
)
from tests.integration.test_workers import DATAPLANE_TOKEN, FakeReplicaControl, RunningJob, run_job
from tests.integration.test_workers_training import assert_same_weights
from tests.model_specs import FC, SGD, with_

PROBE = Path(__file__).with_name("hostile_probe.py")
NOBODY = 65534
PARAMS = with_(FC, optimizer=SGD)
NUM_STEPS = 60
OTHER_TOKENS = ["data-plane-token-of-wsjob-another", DATAPLANE_TOKEN + "-attempt-2"]


def world_python() -> str | None:
    """A Python interpreter every user may run (the virtualenv's may sit under /root)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        path = Path(candidate).resolve()
        if path.exists() and all(p.stat().st_mode & 0o001 for p in [path, *path.parents]):
            return str(path)
    return None


PYTHON = world_python()
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or PYTHON is None,
    reason="the hostile user (nobody) needs root to drop to, and a Python it may run",
)


class HeldReports(FakeReplicaControl):
    """Holds the chief's progress reports from its first one until `release`: the job stays in
    the middle of its training (every replica alive, every link open) while the test looks."""

    def __init__(self, topology: control_pb2.Topology) -> None:
        super().__init__(topology)
        self.released = asyncio.Event()
        self.held = 0

    async def ReportProgress(
        self, request: control_pb2.ReportProgressRequest, context: Any
    ) -> control_pb2.ReplicaDirective:
        if not self.released.is_set():
            async with self.changed:
                self.held += 1
                self.changed.notify_all()
            await self.released.wait()
        return await super().ReportProgress(request, context)


@contextlib.asynccontextmanager
async def held_job(tmp_path: Path) -> AsyncIterator[tuple[RunningJob, HeldReports]]:
    """A job held mid-training; released (and finished) when the block ends."""
    async with run_job(tmp_path, 2, 1, 1, NUM_STEPS, PARAMS, control=HeldReports) as job:
        fake = job.fake
        assert isinstance(fake, HeldReports)
        await fake.wait_until(lambda: fake.held > 0, within=60)
        try:
            yield job, fake
        finally:
            fake.released.set()
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()


async def as_nobody(request: dict[str, Any]) -> dict[str, Any]:
    """Run hostile_probe.py as uid/gid 65534 with no groups; its JSON answer."""
    process = await asyncio.create_subprocess_exec(
        str(PYTHON), "-I", "-S", str(PROBE),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd="/",
        user=NOBODY, group=NOBODY, extra_groups=[], env={},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(json.dumps(request).encode()), 60)
    assert process.returncode == 0, out
    answer: dict[str, Any] = json.loads(out)
    return answer


@needs_root
async def test_a_hostile_local_user_reaches_nothing_of_a_running_job(tmp_path: Path) -> None:
    before = dev_shm()
    async with held_job(tmp_path / "attacked") as (job, _):
        pids = [process.pid for process in job.processes.values()]
        fds, spans = rings_held(pids)
        assert fds and spans, "the job runs without shared memory: nothing to attack"
        sockets = socket_names(job.processes)
        request = {"mode": "attack", "token": DATAPLANE_TOKEN, "sockets": list(sockets.values()),
                   "within": local_link._HANDSHAKE_SECONDS - 1, "fds": fds,
                   "map_files": spans, "pids": pids}  # fmt: skip
        report = await as_nobody(request)
        assert all(process.returncode is None for process in job.processes.values())
        during = dev_shm()
        inodes = rings_of(pids)

    assert (report["uid"], report["gid"], report["groups"]) == (NOBODY, NOBODY, [])
    # The job ended well: none of its rings or sockets is left.
    assert not holders(inodes) and not set(sockets.values()) & abstract_sockets()
    # Nothing of the job under /dev/shm, then or now: its rings are memfds.
    assert not during - before and not dev_shm() - before
    opened = {name for name, outcome in report["dev_shm"].items() if "OPENED" in outcome}
    assert not opened & (before | during), opened  # nor anything else of our user's
    # It sees every replica's socket, and each turns it away: no descriptor, whatever it says.
    assert set(report["sockets"]) == set(sockets.values()), report["found_sockets"]
    for name, knocks in report["sockets"].items():
        for how, outcome in knocks.items():
            assert outcome["fds"] == 0, f"{how} at {name}: {outcome}"
            assert (outcome["received"], outcome["closed"]) == (REFUSAL.decode(), True), (
                f"{how} at {name}: {outcome}"
            )
    opened = {what: got for what, got in report["attempts"].items() if "refused" not in got}
    assert not opened, opened
    for pid in pids:
        assert report["attempts"][f"/proc/{pid}/environ"].startswith("refused")

    async with run_job(tmp_path / "alone", 2, 1, 1, NUM_STEPS, PARAMS) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    assert_same_weights(tmp_path / "attacked" / "model", tmp_path / "alone" / "model")


async def raw_knock(name: str, token: str) -> tuple[bytes, int]:
    """Present `token` at abstract socket `name` by hand: all it answers, and how many
    descriptors came with it."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    with sock:
        await loop.sock_connect(sock, "\0" + name)
        greeting = local_link._GREETING + struct.pack("<H", len(token)) + token.encode()
        await loop.sock_sendall(sock, greeting)
        answer, descriptors = b"", 0
        while True:
            readable = loop.create_future()
            loop.add_reader(sock.fileno(), readable.set_result, None)
            try:
                await asyncio.wait_for(readable, 10)
            finally:
                loop.remove_reader(sock.fileno())
            data, fds, _, _ = socket.recv_fds(sock, 4096, 16)
            descriptors += len(fds)
            for fd in fds:
                os.close(fd)
            if not data:
                return answer, descriptors
            answer += data


async def test_another_jobs_token_gets_no_ring(tmp_path: Path) -> None:
    async with held_job(tmp_path) as (job, _):
        for replica, name in socket_names(job.processes).items():
            for token in OTHER_TOKENS:
                with pytest.raises(LinkClosed, match="credential"):
                    await local_link.connect("\0" + name, token)
                assert await raw_knock(name, token) == (REFUSAL, 0), replica
            assert not rings_held([os.getpid()])[0]  # nothing came of it in this process
            assert job.processes[replica].returncode is None


@needs_root
async def test_a_replica_never_gives_its_token_to_a_socket_another_user_serves() -> None:
    """A replica gone (SIGKILL), its name seen in /proc/net/unix and bound by another user
    before a peer calls it again: the peer hangs up before it says anything."""
    name = local_address(DATAPLANE_TOKEN, "cs2-9")
    process = await asyncio.create_subprocess_exec(
        str(PYTHON), "-I", "-S", str(PROBE),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd="/",
        user=NOBODY, group=NOBODY, extra_groups=[], env={},
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps({"mode": "squat", "name": name[1:], "within": 10}).encode())
        process.stdin.close()
        assert await asyncio.wait_for(process.stdout.readline(), 30) == b"listening\n"
        with pytest.raises(LinkClosed, match="another user"):
            await local_link.connect(name, DATAPLANE_TOKEN)
        heard = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
    assert heard == {"heard": ""}
