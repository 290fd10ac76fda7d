"""The floor of a weight-streaming step on gRPC: the fc_mnist traffic with no work at all.

    python -m bench.data_plane_floor [--steps N] [--runs 3] [--modes aio,sync,aio-streams]

Three processes (cs2, swarmx, memoryx) move exactly the default fc_mnist job's tensors each step
over the same call shapes, lanes and channel options as the replicas
(appliance.workers.weight_rpc, appliance.workers.channels): the CS-2 reads the step's three
units (10 KB, 263 KB, 803 KB: last unit first) from SwarmX, which relays them from MemoryX, then
pushes their gradients (last unit first) through SwarmX to MemoryX; MemoryX sends a unit of
step k + 1 only once its gradient of step k is in, as the real update does. Nothing is
computed, parsed or copied by hand: messages are pre-built bytes passed through unchanged.

Three modes: `aio`, grpc.aio with a weights call and a gradients call a step and hop, as the
replicas do; `sync`, the same calls on the synchronous thread-per-call API; `aio-streams`,
grpc.aio with one long-lived call each way and hop for the whole run (no call set up per step).
Each runs twice: relayed through SwarmX as above, and direct (the CS-2 calls MemoryX; no
SwarmX), the least any design that keeps the CS-2 and MemoryX in processes of their own moves.

What it gives: the step time and CPU per step of the data plane alone. Compute (the
single-process step, ~1.9 ms) can only add to it; the weight-streaming benchmark's goal for
fc_mnist is a 1-CS-2 step of at most twice that single-process step.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.workers.channels import CHANNEL_OPTIONS  # noqa: E402
from bench.common import emit, median_run  # noqa: E402

SERVICE = "bench.Floor"
# The default fc_mnist units (examples/params_fc_mnist.yaml): weight + bias, float32.
UNIT_BYTES = [(784 * 256 + 256) * 4, (256 * 256 + 256) * 4, (256 * 10 + 10) * 4]
WARMUP_STEPS = 200
# How the CS-2 calls: grpc.aio, two calls a step (as the replicas); the synchronous API, the same
# calls; grpc.aio, one long-lived call each way for the whole run.
MODES = ("aio", "sync", "aio-streams")


def _identity(data: bytes) -> bytes:
    return data


def _weights_request(step: int, count: int = 1) -> bytes:
    """Ask for the weights of `count` steps from `step` on."""
    return step.to_bytes(4, "little") + count.to_bytes(4, "little")


def _steps_asked(request: bytes) -> tuple[int, int]:
    return int.from_bytes(request[:4], "little"), int.from_bytes(request[4:], "little")


def _gradient(step: int, size: int) -> bytes:
    return step.to_bytes(4, "little") + bytes(size - 4)


def _handlers(weights: object, gradients: object) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Weights": grpc.unary_stream_rpc_method_handler(weights, _identity, _identity),
            "Gradients": grpc.stream_unary_rpc_method_handler(gradients, _identity, _identity),
        },
    )


class _Client:
    """Weights and gradients on connections of their own, as the replicas' lanes."""

    def __init__(self, address: str, sync: bool = False) -> None:
        connect = grpc.insecure_channel if sync else grpc.aio.insecure_channel
        weights, gradients = (connect(address, options=CHANNEL_OPTIONS) for _ in range(2))
        self.weights = weights.unary_stream(f"/{SERVICE}/Weights", _identity, _identity)
        self.gradients = gradients.stream_unary(f"/{SERVICE}/Gradients", _identity, _identity)


async def _serve(role: str, upstream: str | None) -> None:
    if role == "memoryx":
        payloads = [bytes(size) for size in UNIT_BYTES]
        arrived: dict[tuple[int, int], asyncio.Event] = {}

        def event(step: int, unit: int) -> asyncio.Event:
            return arrived.setdefault((step, unit), asyncio.Event())

        async def weights(request: bytes, context: object) -> AsyncIterator[bytes]:
            first, count = _steps_asked(request)
            for step in range(first, first + count):
                for unit in reversed(range(len(payloads))):  # topology.weight_order
                    if step > 0:  # the update of step - 1 must be in
                        await event(step - 1, unit).wait()
                        arrived.pop((step - 1, unit), None)
                    yield payloads[unit]

        async def gradients(requests: AsyncIterator[bytes], context: object) -> bytes:
            async for message in requests:  # a unit's gradient: its size names it, then step
                step = int.from_bytes(message[:4], "little")
                event(step, UNIT_BYTES.index(len(message))).set()
            return b"ok"

    else:
        assert upstream is not None
        client = _Client(upstream)

        async def weights(request: bytes, context: object) -> AsyncIterator[bytes]:
            async for message in client.weights(request):
                yield message

        async def gradients(requests: AsyncIterator[bytes], context: object) -> bytes:
            answer: bytes = await client.gradients(requests)
            return answer

    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers((_handlers(weights, gradients),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def _drive(address: str, steps: int) -> None:
    """Each step: push its gradients while reading the next step's weights, one call each."""
    client = _Client(address)
    sizes = list(reversed(UNIT_BYTES))

    async def read_weights(step: int) -> None:
        count = 0
        async for _ in client.weights(_weights_request(step)):
            count += 1
        assert count == len(UNIT_BYTES)

    async def push(step: int) -> None:
        async def messages() -> AsyncIterator[bytes]:
            for size in sizes:
                yield _gradient(step, size)

        await client.gradients(messages())

    await read_weights(0)
    for step in range(steps):
        if step == WARMUP_STEPS:
            print("measure", flush=True)
        nxt = [read_weights(step + 1)] if step + 1 < steps else []
        await asyncio.gather(push(step), *nxt)
    print("done", flush=True)


async def _drive_streams(address: str, steps: int) -> None:
    """_drive with one long-lived call each way for the whole run instead of two a step."""
    client = _Client(address)
    sizes = list(reversed(UNIT_BYTES))
    outgoing: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def messages() -> AsyncIterator[bytes]:
        while (message := await outgoing.get()) is not None:
            yield message

    pushing = asyncio.ensure_future(client.gradients(messages()))
    weights = aiter(client.weights(_weights_request(0, steps)))
    for step in range(steps):
        if step == WARMUP_STEPS:
            print("measure", flush=True)
        for _ in UNIT_BYTES:  # this step's weights
            await anext(weights)
        for size in sizes:
            outgoing.put_nowait(_gradient(step, size))
    outgoing.put_nowait(None)
    await pushing
    print("done", flush=True)


def _serve_sync(role: str, upstream: str | None) -> None:
    """_serve with the synchronous (thread-per-call) gRPC API."""
    if role == "memoryx":
        payloads = [bytes(size) for size in UNIT_BYTES]
        arrived: dict[tuple[int, int], threading.Event] = {}
        lock = threading.Lock()

        def event(step: int, unit: int) -> threading.Event:
            with lock:
                return arrived.setdefault((step, unit), threading.Event())

        def weights(request: bytes, context: object) -> Iterator[bytes]:
            step, _ = _steps_asked(request)
            for unit in reversed(range(len(payloads))):
                if step > 0:
                    event(step - 1, unit).wait()
                    with lock:
                        arrived.pop((step - 1, unit), None)
                yield payloads[unit]

        def gradients(requests: Iterator[bytes], context: object) -> bytes:
            for message in requests:
                event(int.from_bytes(message[:4], "little"), UNIT_BYTES.index(len(message))).set()
            return b"ok"

    else:
        assert upstream is not None
        client = _Client(upstream, sync=True)

        def weights(request: bytes, context: object) -> Iterator[bytes]:
            yield from client.weights(request)

        def gradients(requests: Iterator[bytes], context: object) -> bytes:
            answer: bytes = client.gradients(requests)
            return answer

    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers((_handlers(weights, gradients),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def _drive_sync(address: str, steps: int) -> None:
    client = _Client(address, sync=True)
    sizes = list(reversed(UNIT_BYTES))

    def read_weights(step: int) -> None:
        assert sum(1 for _ in client.weights(_weights_request(step))) == len(UNIT_BYTES)

    def push(step: int) -> None:
        client.gradients(_gradient(step, size) for size in sizes)

    read_weights(0)
    with ThreadPoolExecutor(max_workers=1) as reader:
        for step in range(steps):
            if step == WARMUP_STEPS:
                print("measure", flush=True)
            nxt = reader.submit(read_weights, step + 1) if step + 1 < steps else None
            push(step)
            if nxt is not None:
                nxt.result()
    print("done", flush=True)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _port(name: str, process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port:
        raise RuntimeError(f"the {name} process did not start")
    return port


def _spawn(mode: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.data_plane_floor",
            "--mode",
            mode,
            "--role",
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def measure(mode: str, relayed: bool, steps: int) -> dict[str, object]:
    """One run: the step time and each process's CPU per step over steps past the warm-up.

    Without `relayed` the CS-2 talks to MemoryX directly: the least any design with the two
    in separate processes moves.
    """
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        processes["memoryx"] = upstream = _spawn(mode, "memoryx")
        if relayed:
            processes["swarmx"] = upstream = _spawn(
                mode,
                "swarmx",
                "--upstream",
                f"127.0.0.1:{_port('memoryx', processes['memoryx'])}",
            )
        address = f"127.0.0.1:{_port('upstream', upstream)}"
        processes["cs2"] = cs2 = _spawn(mode, "cs2", "--upstream", address, "--steps", str(steps))
        assert cs2.stdout is not None
        if cs2.stdout.readline().strip() != "measure":
            raise RuntimeError("the cs2 process ended before the warm-up did")
        start = time.perf_counter()
        cpu_start = {name: _cpu_seconds(p.pid) for name, p in processes.items()}
        if cs2.stdout.readline().strip() != "done":
            raise RuntimeError("the cs2 process failed")
        elapsed = time.perf_counter() - start
        cpu = {name: _cpu_seconds(p.pid) - cpu_start[name] for name, p in processes.items()}
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
    measured = steps - WARMUP_STEPS
    return {
        "step_ms": round(elapsed / measured * 1000, 3),
        "cpu_ms_per_step": {n: round(s / measured * 1000, 3) for n, s in cpu.items()},
        "cpu_ms_per_step_total": round(sum(cpu.values()) / measured * 1000, 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of: %(default)s"
    )
    parser.add_argument("--no-record", action="store_true", help="do not write results.json")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=["cs2", "swarmx", "memoryx"], help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "cs2":
        if args.mode == "sync":
            _drive_sync(args.upstream, args.steps)
        else:
            drive = _drive_streams if args.mode == "aio-streams" else _drive
            asyncio.run(drive(args.upstream, args.steps))
        return
    if args.role:
        if args.mode == "sync":
            _serve_sync(args.role, args.upstream)
        else:
            asyncio.run(_serve(args.role, args.upstream))
        return
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes takes some of {', '.join(MODES)}, comma-separated")
    result: dict[str, object] = {"steps": args.steps, "warmup_steps": WARMUP_STEPS}
    for mode in modes:
        for layout, relayed in (("relayed", True), ("direct", False)):
            runs = [measure(mode, relayed, args.steps) for _ in range(args.runs)]
            median = median_run(runs, "step_ms")
            result[f"{mode}_{layout}"] = {
                "median_step_ms": median["step_ms"],
                "median_cpu_ms_per_step": median["cpu_ms_per_step_total"],
                "runs": runs,
            }
    emit("data_plane_floor", result)


if __name__ == "__main__":
    main()
