"""Real worker processes against a test-only ReplicaControl coordinator on 127.0.0.1:0.

The fake coordinator is a seam of our own: it registers replicas, answers AwaitPeers once all
expected replicas registered, records progress and answers heartbeats. No sleeps stand in for
synchronisation: tests wait on process exits and on conditions the fake signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
import pytest
import yaml

from appliance._proto.v1 import common_pb2, control_pb2, control_pb2_grpc
from appliance.domain.auth import ATTEMPT_ENV, DATAPLANE_TOKEN_ENV
from appliance.domain.params import parse_params
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.server.pki import CertificateAuthority
from appliance.server.replica_identity import ReplicaIdentities
from appliance.workers.models.reference import ReferenceTrainer

ROOT = Path(__file__).resolve().parents[2]
JOB_ID = "wsjob-testworkers01"
# Unique to this run: a replica's local socket is named after the token, in the host's one
# abstract namespace, so two runs of these tests on one machine must not share it.
DATAPLANE_TOKEN = f"data-plane-token-of-{JOB_ID}-{secrets.token_hex(8)}"


class FakeReplicaControl(control_pb2_grpc.ReplicaControlServicer):
    """Just enough of the coordinator's worker-control service for one job."""

    def __init__(self, topology: control_pb2.Topology) -> None:
        self.topology = topology
        self.expected = {p.name for p in topology.peers}
        self.addresses: dict[str, str] = {}
        self.progress: list[common_pb2.Progress] = []
        self.keep_running = True
        self.changed = asyncio.Condition()

    async def wait_until(self, predicate: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within), self.changed:
            await self.changed.wait_for(predicate)

    async def RegisterReplica(
        self, request: control_pb2.RegisterReplicaRequest, context: Any
    ) -> control_pb2.RegisterReplicaResponse:
        async with self.changed:
            self.addresses[request.replica] = request.address
            self.changed.notify_all()
        return control_pb2.RegisterReplicaResponse()

    async def AwaitPeers(
        self, request: control_pb2.AwaitPeersRequest, context: Any
    ) -> control_pb2.Topology:
        await self.wait_until(lambda: set(self.addresses) >= self.expected, within=30)
        topology = control_pb2.Topology()
        topology.CopyFrom(self.topology)
        for peer in topology.peers:
            peer.address = self.addresses[peer.name]
        return topology

    async def ReportProgress(
        self, request: control_pb2.ReportProgressRequest, context: Any
    ) -> control_pb2.ReplicaDirective:
        async with self.changed:
            self.progress.append(request.progress)
            self.changed.notify_all()
        return control_pb2.ReplicaDirective(keep_running=self.keep_running)

    async def Heartbeat(
        self, request: control_pb2.HeartbeatRequest, context: Any
    ) -> control_pb2.ReplicaDirective:
        return control_pb2.ReplicaDirective(keep_running=self.keep_running)


def make_topology(
    num_csx: int,
    memoryx: int,
    swarmx: int,
    num_steps: int,
    params: dict[str, Any],
    model_dir: Path,
    mode: common_pb2.Mode.ValueType = common_pb2.MODE_TRAIN,
) -> control_pb2.Topology:
    peers = [control_pb2.Peer(name="chief-0", role="chief", index=0)]
    # Input workers, as the coordinator plans them: num_workers_per_csx per CS-2 on a data set.
    reads = any(params.get(s, {}).get("data_dir") for s in ("train_input", "eval_input"))
    per_cs2 = params.get("runconfig", {}).get("num_workers_per_csx", 1)
    workers = num_csx * per_cs2 if reads else 0
    for role, count in (
        ("cs2", num_csx), ("memoryx", memoryx), ("swarmx", swarmx), ("worker", workers)
    ):  # fmt: skip
        peers += [control_pb2.Peer(name=f"{role}-{i}", role=role, index=i) for i in range(count)]
    return control_pb2.Topology(
        job_id=JOB_ID,
        params_yaml=yaml.safe_dump(params),
        num_csx=num_csx,
        num_steps=num_steps,
        mode=mode,
        model_dir=str(model_dir),
        peers=peers,
    )


async def start_replica(
    replica: str, coordinator: str, log_dir: Path, *extra: str, data_plane: str = ""
) -> asyncio.subprocess.Process:
    """Start one replica; `data_plane` ("grpc", "shared-memory") overrides its transport."""
    role = replica.rsplit("-", 1)[0]
    log = (log_dir / f"{replica}.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT), DATAPLANE_TOKEN_ENV: DATAPLANE_TOKEN}
    env.update(replica_identity(replica))
    if data_plane:
        env["APPLIANCE_DATA_PLANE"] = data_plane
    args = ["-m", "appliance.workers", role, "--job-id", JOB_ID, "--replica", replica]
    with log:
        return await asyncio.create_subprocess_exec(
            sys.executable, *args, "--coordinator", coordinator, *extra,
            stdout=log, stderr=log, env=env, cwd=ROOT,
        )  # fmt: skip


def replica_identity(replica: str) -> dict[str, str]:
    """The certificate a TLS-serving coordinator would give `replica` (attempt 1), from the CA
    in APPLIANCE_TLS_CA_DIR (the session's, under pytest: the data plane then runs mutual
    TLS, as under a real coordinator); none when that is unset (plaintext, token only)."""
    directory = os.environ.get("APPLIANCE_TLS_CA_DIR")
    if not directory:
        return {}
    identities = ReplicaIdentities(CertificateAuthority.load_or_create(Path(directory)))
    return {ATTEMPT_ENV: "1", **identities.environment(JOB_ID, 1, replica)}


class RunningJob:
    """A fake coordinator plus the replica processes of one job."""

    def __init__(self, fake: FakeReplicaControl, processes: dict[str, Any], log_dir: Path) -> None:
        self.fake = fake
        self.processes: dict[str, asyncio.subprocess.Process] = processes
        self.log_dir = log_dir

    async def exit_code(self, replica: str, within: float) -> int:
        try:
            return await asyncio.wait_for(self.processes[replica].wait(), within)
        except TimeoutError:
            pytest.fail(f"{replica} still running after {within}s\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.log_dir.glob("*.log")))


@contextlib.asynccontextmanager
async def coordinator(
    fake: FakeReplicaControl, address: str = "127.0.0.1:0"
) -> AsyncIterator[str]:
    server = grpc.aio.server()
    control_pb2_grpc.add_ReplicaControlServicer_to_server(fake, server)
    port = server.add_insecure_port(address)
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def replicas(
    names: list[str], address: str, log_dir: Path, data_plane: Mapping[str, str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Start the named replicas (with the transports `data_plane` names, by replica); kill
    whatever is left at the end and check nothing survived."""
    processes: dict[str, asyncio.subprocess.Process] = {}
    chosen = data_plane or {}
    try:
        for name in names:
            processes[name] = await start_replica(
                name, address, log_dir, data_plane=chosen.get(name, chosen.get("*", ""))
            )
        yield processes
    finally:
        for process in processes.values():
            if process.returncode is None:
                process.kill()
            await process.wait()
        pids = {p.pid for p in processes.values()}
        alive = [p for p in psutil.Process().children(recursive=True) if p.pid in pids]
        assert not alive, f"worker processes left behind: {alive}"


@contextlib.asynccontextmanager
async def run_job(
    tmp_path: Path,
    num_csx: int,
    memoryx: int,
    swarmx: int,
    num_steps: int,
    params: dict[str, Any],
    mode: common_pb2.Mode.ValueType = common_pb2.MODE_TRAIN,
    model_dir: Path | None = None,
    log_dir: Path | None = None,
    data_plane: Mapping[str, str] | None = None,
    control: type[FakeReplicaControl] = FakeReplicaControl,
) -> AsyncIterator[RunningJob]:
    """A job on real replica processes; `data_plane` gives replicas (or "*": all) a transport
    ("grpc", "shared-memory"; by default the workers' own default); `control`: the fake
    coordinator's class (a test may hold or answer calls its way)."""
    model_dir = model_dir or tmp_path / "model"
    topology = make_topology(num_csx, memoryx, swarmx, num_steps, params, model_dir, mode)
    fake = control(topology)
    log_dir = log_dir or tmp_path / "logs"
    log_dir.mkdir(parents=True)
    names = [p.name for p in topology.peers]
    async with (
        coordinator(fake) as address,
        replicas(names, address, log_dir, data_plane) as processes,
    ):
        yield RunningJob(fake, processes, log_dir)


def calls_made(job: RunningJob, replica: str) -> dict[str, int]:
    """The WeightStreaming calls a replica made, by method, as it logged them on exit."""
    log = (job.log_dir / f"{replica}.log").read_text()
    found = re.findall(r"weight-streaming calls made: (\{.*\})", log)
    assert len(found) == 1, log
    calls: dict[str, int] = json.loads(found[0])
    return calls


DEFAULT_MODEL = {"model": {"name": "fc_mnist"}, "optimizer": {"learning_rate": 0.05}}
SMALL_MODEL = {
    "model": {"input_size": 64, "hidden_sizes": [48, 32], "num_classes": 10},
    "train_input": {"batch_size": 30},
    "optimizer": {"learning_rate": 0.1},
    "runconfig": {"seed": 7},
}


async def test_two_cs2_job_trains_and_shuts_down(tmp_path: Path) -> None:
    num_steps = 40
    async with run_job(tmp_path, 2, 1, 1, num_steps, DEFAULT_MODEL) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
        for name in job.processes:
            assert await job.exit_code(name, within=5) == 0, f"{name}\n{job.logs()}"

    final = job.fake.progress[-1]
    assert (final.step, final.num_steps) == (num_steps, num_steps)
    assert final.steps_per_second > 0 and final.samples_per_second == pytest.approx(
        final.steps_per_second * 32
    )
    reference_losses = ReferenceTrainer(parse_params(DEFAULT_MODEL), 40).train()
    assert final.loss == pytest.approx(reference_losses[-1], rel=1e-4)
    assert final.loss < reference_losses[0]  # the loss of the first step
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["step"] == num_steps and metrics["loss"] == pytest.approx(final.loss)
    steps = [p.step for p in job.fake.progress]
    assert steps == sorted(steps)
    rates = ", ".join(f"{p.steps_per_second:.1f}" for p in job.fake.progress)
    print(f"steps/s reported by a 2-CS-2 default fc_mnist job: {rates}")


@pytest.mark.parametrize(("num_csx", "swarmx"), [(1, 1), (2, 1), (4, 2)])
async def test_final_weights_do_not_depend_on_the_number_of_cs2(
    tmp_path: Path, num_csx: int, swarmx: int
) -> None:
    num_steps = 12
    async with run_job(tmp_path, num_csx, 2, swarmx, num_steps, SMALL_MODEL) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
        for name in job.processes:  # each logs its calls as it exits
            assert await job.exit_code(name, within=5) == 0, f"{name}\n{job.logs()}"

    # Every training run's tensors travel on calls set up once, not once a step: each CS-2
    # makes one weights call and one push, each SwarmX one of each per MemoryX.
    for name in job.processes:
        if name.startswith("cs2-"):
            assert calls_made(job, name) == {"StreamStepWeights": 1, "PushGradients": 1}
        elif name.startswith("swarmx-"):
            assert calls_made(job, name) == {"StreamStepWeights": 2, "PushGradients": 2}

    reference = ReferenceTrainer(parse_params(SMALL_MODEL), num_steps)
    reference.train()
    with np.load(tmp_path / "model" / "weights.npz") as saved:
        for i, layer in enumerate(reference.weights):
            for name, expected in ((f"weight_{i}", layer["weight"]), (f"bias_{i}", layer["bias"])):
                got = saved[name]
                assert got.shape == expected.shape
                relative = np.abs(got - expected).max() / np.abs(expected).max()
                assert relative <= 1e-5, f"{name}: max relative difference {relative}"


async def test_killed_cs2_fails_the_chief_promptly(tmp_path: Path) -> None:
    async with run_job(tmp_path, 2, 1, 1, 1_000_000, DEFAULT_MODEL) as job:
        await job.fake.wait_until(lambda: any(p.step >= 2 for p in job.fake.progress), within=30)
        job.processes["cs2-1"].send_signal(signal.SIGKILL)
        code = await job.exit_code("chief-0", within=5)
        assert code == EXIT_PEER_FAILED, job.logs()  # the cause is cs2-1
        assert "cs2-1" in (job.log_dir / "chief-0.log").read_text()


async def test_sigterm_stops_a_replica_within_a_second(tmp_path: Path) -> None:
    async with run_job(tmp_path, 1, 1, 1, 10, SMALL_MODEL) as job:
        await job.fake.wait_until(lambda: "memoryx-0" in job.fake.addresses, within=30)
        job.processes["memoryx-0"].send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert await job.exit_code("memoryx-0", within=5) == 143
        assert time.monotonic() - started < 1.0


async def test_replicas_exit_0_when_the_coordinator_says_stop(tmp_path: Path) -> None:
    async with run_job(tmp_path, 1, 1, 1, 1_000_000, SMALL_MODEL) as job:
        await job.fake.wait_until(lambda: bool(job.fake.progress), within=30)
        job.fake.keep_running = False
        for name in job.processes:
            assert await job.exit_code(name, within=10) == 0, f"{name}\n{job.logs()}"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_contains(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


async def wait_for_text(path: Path, text: str, within: float) -> None:
    """Poll a replica's log for `text`: a real condition, the sleep only paces the polling."""
    async with asyncio.timeout(within):
        while not await asyncio.to_thread(log_contains, path, text):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_registration_retries_until_the_coordinator_is_up(tmp_path: Path) -> None:
    topology = make_topology(1, 1, 1, 1, SMALL_MODEL, tmp_path / "model")
    fake = FakeReplicaControl(topology)
    address = f"127.0.0.1:{free_port()}"
    async with replicas(["memoryx-0"], address, tmp_path) as processes:
        await wait_for_text(tmp_path / "memoryx-0.log", "RegisterReplica failed", within=10)
        async with coordinator(fake, address):
            await fake.wait_until(lambda: "memoryx-0" in fake.addresses, within=10)
            fake.keep_running = False
            assert await asyncio.wait_for(processes["memoryx-0"].wait(), timeout=10) == 0


async def test_replica_without_coordinator_exits_3_after_orphan_timeout(tmp_path: Path) -> None:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        dead_address = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
        process = await start_replica("cs2-0", dead_address, tmp_path, "--orphan-timeout", "1")
        try:
            assert await asyncio.wait_for(process.wait(), timeout=10) == 3
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    assert "orphan timeout" in (tmp_path / "cs2-0.log").read_text()
