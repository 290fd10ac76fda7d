"""The floor of a weight-streaming step on gRPC: the fc_mnist traffic with no work at all.

    python -m bench.data_plane_floor [--steps N] [--runs 5] [--modes aio,sync,aio_streams]
                                     [--chunk-kib 1024,256]

Three processes (cs2, swarmx, memoryx) move exactly the default fc_mnist job's tensors each step
with the replicas' lanes and channel options (appliance.workers.transport.channels): the CS-2 reads
the step's three units (10 KB, 263 KB, 803 KB: last unit first, the schedule before #34) from
SwarmX,
which relays them from MemoryX, then pushes their gradients (last unit first) through SwarmX to
MemoryX. Messages are at most the chunk size (the replicas' CHUNK_BYTES is 1 MiB, so each unit is
one message); MemoryX sends chunk i of step k + 1 once chunk i of step k's gradient is in, as an
update applied chunk by chunk would (with 1 MiB chunks: a unit once its gradient is in, as the
replicas' update does). Nothing is computed or parsed: every message is built once, before the
first step, and passed through unchanged (MemoryX tells a gradient's step and chunk by its place in
the stream of gradients).

Modes: `aio`, grpc.aio with a weights call and a gradients call a step and hop, as the replicas
(the CS-2 reads step k + 1's weights while it pushes step k's gradients); `sync`, the same calls
on the synchronous thread-per-call API; `aio_streams`, grpc.aio with one long-lived call each way
and hop for the whole run (no call set up per step). Each runs relayed through SwarmX as above,
and direct (the CS-2 calls MemoryX; no SwarmX).

What it gives: the step time and CPU per step of the data plane alone. Compute can only add to
it; the weight-streaming benchmark's goal for fc_mnist is a 1-CS-2 step of at most twice the
single-process step (1.91 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.workers.transport.channels import CHANNEL_OPTIONS  # noqa: E402
from bench.common import emit, median_run  # noqa: E402

SERVICE = "bench.Floor"
# The default fc_mnist units (examples/params_fc_mnist.yaml): weight + bias, float32.
UNIT_BYTES = [(784 * 256 + 256) * 4, (256 * 256 + 256) * 4, (256 * 10 + 10) * 4]
WARMUP_STEPS = 200
MODES = ("aio", "sync", "aio_streams")
CALL_TIMEOUT = 60.0  # seconds a per-step call may take; a long-lived call gets the run's
RUN_TIMEOUT = 600.0  # seconds a run may take before its processes are killed
_Event = TypeVar("_Event", asyncio.Event, threading.Event)


def messages_of_step(chunk_bytes: int) -> list[int]:
    """Sizes of one step's messages, in weight order (the gradients go in the same order)."""
    return [
        min(chunk_bytes, size - start)
        for size in reversed(UNIT_BYTES)
        for start in range(0, size, chunk_bytes)
    ]


def _identity(data: bytes) -> bytes:
    return data


def _weights_request(step: int, count: int = 1) -> bytes:
    """Ask for the weights of `count` steps from `step` on."""
    return step.to_bytes(4, "little") + count.to_bytes(4, "little")


def _steps_asked(request: bytes) -> range:
    first = int.from_bytes(request[:4], "little")
    return range(first, first + int.from_bytes(request[4:], "little"))


class _Client:
    """Weights and gradients on connections of their own, as the replicas' lanes."""

    def __init__(self, address: str, sync: bool = False) -> None:
        connect = grpc.insecure_channel if sync else grpc.aio.insecure_channel
        weights, gradients = (connect(address, options=CHANNEL_OPTIONS) for _ in range(2))
        self.weights = weights.unary_stream(f"/{SERVICE}/Weights", _identity, _identity)
        self.gradients = gradients.stream_unary(f"/{SERVICE}/Gradients", _identity, _identity)


def _serve_on(server: grpc.Server | grpc.aio.Server, weights: object, gradients: object) -> int:
    handlers = {
        "Weights": grpc.unary_stream_rpc_method_handler(weights, _identity, _identity),
        "Gradients": grpc.stream_unary_rpc_method_handler(gradients, _identity, _identity),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port: int = server.add_insecure_port("127.0.0.1:0")
    return port


class _Updates(Generic[_Event]):
    """MemoryX's bookkeeping: which chunk of which step's gradient is in, counted in order."""

    def __init__(self, per_step: int, new_event: Callable[[], _Event]) -> None:
        self.per_step = per_step
        self._new_event: Callable[[], _Event] = new_event
        self._received = 0
        self._lock = threading.Lock()
        self._arrived: dict[int, _Event] = {}

    def event(self, step: int, index: int) -> _Event:
        with self._lock:
            key = step * self.per_step + index
            event = self._arrived.get(key)
            if event is None:
                event = self._arrived[key] = self._new_event()
            return event

    def forget(self, step: int, index: int) -> None:
        with self._lock:
            self._arrived.pop(step * self.per_step + index, None)

    def gradient_in(self) -> None:
        """The next gradient message of the stream is in."""
        step, index = divmod(self._received, self.per_step)
        self._received += 1
        self.event(step, index).set()


async def _serve(role: str, upstream: str | None, chunk_bytes: int) -> None:
    if role == "memoryx":
        sizes = messages_of_step(chunk_bytes)
        payloads = [bytes(size) for size in sizes]
        updates = _Updates(len(sizes), asyncio.Event)

        async def weights(request: bytes, context: object) -> AsyncIterator[bytes]:
            for step in _steps_asked(request):
                for index, payload in enumerate(payloads):
                    if step > 0:  # chunk `index` of step - 1's update must be in
                        await updates.event(step - 1, index).wait()
                        updates.forget(step - 1, index)
                    yield payload

        async def gradients(requests: AsyncIterator[bytes], context: object) -> bytes:
            async for _ in requests:
                updates.gradient_in()
            return b"ok"

    else:
        assert upstream is not None
        client = _Client(upstream)

        async def weights(request: bytes, context: object) -> AsyncIterator[bytes]:
            async for message in client.weights(request, timeout=_timeout(request)):
                yield message

        async def gradients(requests: AsyncIterator[bytes], context: object) -> bytes:
            answer: bytes = await client.gradients(requests, timeout=RUN_TIMEOUT)
            return answer

    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    port = _serve_on(server, weights, gradients)
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def _timeout(request: bytes) -> float:
    return CALL_TIMEOUT if len(_steps_asked(request)) == 1 else RUN_TIMEOUT


async def _drive(address: str, steps: int, chunk_bytes: int) -> None:
    """Each step: push its gradients while reading the next step's weights, one call each."""
    client = _Client(address)
    gradients = [bytes(size) for size in messages_of_step(chunk_bytes)]

    async def read_weights(step: int) -> None:
        count = 0
        async for _ in client.weights(_weights_request(step), timeout=CALL_TIMEOUT):
            count += 1
        if count != len(gradients):
            raise RuntimeError(f"step {step}: {count} weight messages, not {len(gradients)}")

    async def push() -> None:
        async def messages() -> AsyncIterator[bytes]:
            for message in gradients:
                yield message

        await client.gradients(messages(), timeout=CALL_TIMEOUT)

    await read_weights(0)
    for step in range(steps):
        if step == WARMUP_STEPS:
            print("measure", flush=True)
        nxt = [read_weights(step + 1)] if step + 1 < steps else []
        await asyncio.gather(push(), *nxt)
    print("done", flush=True)


async def _drive_streams(address: str, steps: int, chunk_bytes: int) -> None:
    """_drive with one long-lived call each way for the whole run instead of two a step."""
    client = _Client(address)
    gradients = [bytes(size) for size in messages_of_step(chunk_bytes)]
    outgoing: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def messages() -> AsyncIterator[bytes]:
        while (message := await outgoing.get()) is not None:
            yield message

    pushing = asyncio.ensure_future(client.gradients(messages(), timeout=RUN_TIMEOUT))
    try:
        weights = aiter(client.weights(_weights_request(0, steps), timeout=RUN_TIMEOUT))
        for step in range(steps):
            if step == WARMUP_STEPS:
                print("measure", flush=True)
            for _ in gradients:  # this step's weights
                await anext(weights)
            for message in gradients:
                outgoing.put_nowait(message)
        outgoing.put_nowait(None)
        await pushing
    finally:
        pushing.cancel()
    print("done", flush=True)


def _serve_sync(role: str, upstream: str | None, chunk_bytes: int) -> None:
    """_serve with the synchronous (thread-per-call) gRPC API."""
    if role == "memoryx":
        sizes = messages_of_step(chunk_bytes)
        payloads = [bytes(size) for size in sizes]
        updates = _Updates(len(sizes), threading.Event)

        def weights(request: bytes, context: object) -> Iterator[bytes]:
            for step in _steps_asked(request):
                for index, payload in enumerate(payloads):
                    if step > 0:
                        updates.event(step - 1, index).wait()
                        updates.forget(step - 1, index)
                    yield payload

        def gradients(requests: Iterator[bytes], context: object) -> bytes:
            for _ in requests:
                updates.gradient_in()
            return b"ok"

    else:
        assert upstream is not None
        client = _Client(upstream, sync=True)

        def weights(request: bytes, context: object) -> Iterator[bytes]:
            yield from client.weights(request, timeout=_timeout(request))

        def gradients(requests: Iterator[bytes], context: object) -> bytes:
            answer: bytes = client.gradients(requests, timeout=RUN_TIMEOUT)
            return answer

    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=CHANNEL_OPTIONS)
    port = _serve_on(server, weights, gradients)
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def _drive_sync(address: str, steps: int, chunk_bytes: int) -> None:
    client = _Client(address, sync=True)
    gradients = [bytes(size) for size in messages_of_step(chunk_bytes)]

    def read_weights(step: int) -> None:
        count = sum(1 for _ in client.weights(_weights_request(step), timeout=CALL_TIMEOUT))
        if count != len(gradients):
            raise RuntimeError(f"step {step}: {count} weight messages, not {len(gradients)}")

    read_weights(0)
    with ThreadPoolExecutor(max_workers=1) as reader:
        for step in range(steps):
            if step == WARMUP_STEPS:
                print("measure", flush=True)
            nxt = reader.submit(read_weights, step + 1) if step + 1 < steps else None
            client.gradients(iter(gradients), timeout=CALL_TIMEOUT)
            if nxt is not None:
                nxt.result()
    print("done", flush=True)


def _exit_with_parent() -> None:
    """A role process ends when the benchmark's end of its stdin closes (it ended or died)."""

    def watch() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn(mode: str, chunk_bytes: int, role: str, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "bench.data_plane_floor", "--mode", mode, "--role", role]
    command += ["--chunk-kib", str(chunk_bytes // 1024), *args]
    return subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _line(name: str, process: subprocess.Popen[str]) -> str:
    """The process's next line; RuntimeError if it ended instead (or was killed: see measure)."""
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"the {name} process ended (exit code {process.wait()})")
    return line


def measure(mode: str, relayed: bool, chunk_bytes: int, steps: int) -> dict[str, Any]:
    """One run: the step time and each process's CPU per step over steps past the warm-up."""
    processes: dict[str, subprocess.Popen[str]] = {}

    def kill_all() -> None:
        for process in processes.values():
            process.kill()

    watchdog = threading.Timer(RUN_TIMEOUT, kill_all)  # a wedged run ends with RuntimeError
    watchdog.start()
    try:
        processes["memoryx"] = _spawn(mode, chunk_bytes, "memoryx")
        upstream = f"127.0.0.1:{_line('memoryx', processes['memoryx'])}"
        if relayed:
            processes["swarmx"] = _spawn(mode, chunk_bytes, "swarmx", "--upstream", upstream)
            upstream = f"127.0.0.1:{_line('swarmx', processes['swarmx'])}"
        processes["cs2"] = cs2 = _spawn(
            mode, chunk_bytes, "cs2", "--upstream", upstream, "--steps", str(steps)
        )
        if _line("cs2", cs2) != "measure":
            raise RuntimeError("the cs2 process did not report its warm-up")
        start = time.perf_counter()
        cpu_start = {name: _cpu_seconds(p.pid) for name, p in processes.items()}
        if _line("cs2", cs2) != "done":
            raise RuntimeError("the cs2 process did not finish its steps")
        elapsed = time.perf_counter() - start
        cpu = {name: _cpu_seconds(p.pid) - cpu_start[name] for name, p in processes.items()}
    finally:
        watchdog.cancel()
        kill_all()
        for process in processes.values():
            process.wait()
    measured = steps - WARMUP_STEPS
    return {
        "step_ms": round(elapsed / measured * 1000, 3),
        "cpu_ms_per_step": {n: round(s / measured * 1000, 3) for n, s in cpu.items()},
        "cpu_ms_per_step_total": round(sum(cpu.values()) / measured * 1000, 3),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def _run_role(args: argparse.Namespace) -> None:
    _exit_with_parent()
    chunk_bytes = args.chunk_kib * 1024
    if args.role == "cs2":
        if args.mode == "sync":
            _drive_sync(args.upstream, args.steps, chunk_bytes)
        else:
            drive = _drive_streams if args.mode == "aio_streams" else _drive
            asyncio.run(drive(args.upstream, args.steps, chunk_bytes))
    elif args.mode == "sync":
        _serve_sync(args.role, args.upstream, chunk_bytes)
    else:
        asyncio.run(_serve(args.role, args.upstream, chunk_bytes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2200, help="including 200 warm-up steps")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES), help="some of: %(default)s")
    parser.add_argument("--chunk-kib", default="1024", help="comma-separated; default: 1024")
    parser.add_argument("--no-record", action="store_true", help="do not write results.json")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=["cs2", "swarmx", "memoryx"], help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        args.chunk_kib = int(args.chunk_kib)
        _run_role(args)
        return
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes takes some of {', '.join(MODES)}, comma-separated")
    try:
        chunks_kib = [int(kib) for kib in args.chunk_kib.split(",")]
    except ValueError:
        parser.error("--chunk-kib takes whole KiB, comma-separated (e.g. 1024,256)")
    if any(kib < 1 for kib in chunks_kib):
        parser.error("--chunk-kib must be at least 1")
    result: dict[str, object] = {"steps": args.steps, "warmup_steps": WARMUP_STEPS}
    for kib in chunks_kib:
        for mode in modes:
            for layout, relayed in (("relayed", True), ("direct", False)):
                runs = [measure(mode, relayed, kib * 1024, args.steps) for _ in range(args.runs)]
                median = median_run(runs, "step_ms")
                result[f"{mode} {layout} {kib}KiB"] = {
                    "median_step_ms": median["step_ms"],
                    "median_run_cpu_ms_per_step": median["cpu_ms_per_step_total"],
                    "best_step_ms": min(run["step_ms"] for run in runs),
                    "runs": runs,
                }
    emit("data_plane_floor", result)


if __name__ == "__main__":
    main()
