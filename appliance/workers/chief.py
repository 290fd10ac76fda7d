"""Chief: the per-job driver. Waits for its peers, drives the steps, reports, shuts down.

Each step, every CS-2 is told to run step k; a CS-2's answer comes once the step's updates are
applied in MemoryX, so after all answers the next step may start. The global loss is the
sample-weighted mean of the shards' losses. Any failed or late data-plane call fails the job
(exit 1) after a best-effort Shutdown of the other replicas.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from appliance._proto.v1 import common_pb2, control_pb2, dataplane_pb2_grpc
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.channels import PeerChannels
from appliance.workers.control import ControlPlane
from appliance.workers.fc_mnist import Array
from appliance.workers.lifecycle import EXIT_FAILED, ReplicaExit, StopSignal
from appliance.workers.tensors import collect_layer
from appliance.workers.topology import JobLayout, job_layout

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.5
SHUTDOWN_TIMEOUT = 2.0
CONFIGURE_TIMEOUT = 10.0


class ChiefRole:
    """The chief role: serves only ReplicaLifecycle.Shutdown, drives everything else."""

    def __init__(self, replica: str, step_timeout: float) -> None:
        self.replica = replica
        self._step_timeout = step_timeout
        self._channels = PeerChannels()

    def add_services(self, server: grpc.aio.Server) -> None:
        """The chief serves nothing besides ReplicaLifecycle."""

    def configure(self, layout: JobLayout) -> None:
        """The chief gets its topology from AwaitPeers, not from Configure."""

    async def close(self) -> None:
        await self._channels.close()

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        try:
            topology = await control.await_peers()
            layout = job_layout(topology)
        except ValueError as err:
            raise ReplicaExit(EXIT_FAILED, f"unusable topology: {err}") from err
        log.info(
            "%d cs2, %d memoryx, %d swarmx; %d steps of batch %d",
            len(layout.cs2),
            len(layout.memoryx),
            len(layout.swarmx),
            layout.num_steps,
            layout.config.batch_size,
        )
        try:
            await self._configure_peers(layout, topology)
            finished = await self._train(layout, control, stop)
            if finished:
                await self._write_outputs(layout, finished)
        except Exception:  # not on cancellation (SIGTERM): that must exit at once
            await self._shutdown_peers(layout, "the chief failed")
            raise
        await self._shutdown_peers(layout, "the job finished")

    async def _configure_peers(self, layout: JobLayout, topology: control_pb2.Topology) -> None:
        calls = [
            dataplane_pb2_grpc.ReplicaLifecycleStub(self._channels.get(peer.address)).Configure(
                topology, timeout=CONFIGURE_TIMEOUT
            )
            for peer in layout.others(self.replica)
        ]
        await asyncio.gather(*calls)

    async def _train(
        self, layout: JobLayout, control: ControlPlane, stop: StopSignal
    ) -> tuple[int, float] | None:
        """Run every step; returns (last step, loss), or None if the coordinator said stop."""
        stubs = [
            dataplane_pb2_grpc.StepExecutionStub(self._channels.get(peer.address))
            for peer in layout.cs2
        ]
        batch = layout.config.batch_size
        started = last_report = time.monotonic()
        reported_step = 0
        loss = float("nan")
        for step in range(layout.num_steps):
            try:
                async with asyncio.TaskGroup() as group:
                    calls = [
                        group.create_task(self._run_step(stub, step, peer.name))
                        for stub, peer in zip(stubs, layout.cs2, strict=True)
                    ]
            except ExceptionGroup as failures:  # the first failure cancelled the others
                raise failures.exceptions[0] from None
            results = [call.result() for call in calls]
            loss = sum(r.loss_sum for r in results) / sum(r.num_samples for r in results)
            done = step + 1
            now = time.monotonic()
            if now - last_report >= PROGRESS_INTERVAL or done == layout.num_steps:
                rate = (done - reported_step) / max(now - last_report, 1e-9)
                if reported_step == 0:
                    rate = done / max(now - started, 1e-9)
                progress = common_pb2.Progress(
                    step=done,
                    num_steps=layout.num_steps,
                    loss=loss,
                    steps_per_second=rate,
                    samples_per_second=rate * batch,
                    reported_at=time.time(),
                )
                final = done == layout.num_steps
                directive = await control.report_progress(progress, retry=final)
                log.info("step %d/%d loss %.4f (%.1f steps/s)", done, layout.num_steps, loss, rate)
                last_report, reported_step = now, done
                if directive is not None and not directive.keep_running:
                    log.info("the coordinator says the job is over; stopping at step %d", done)
                    return None
        return layout.num_steps, loss

    async def _run_step(
        self, stub: dataplane_pb2_grpc.StepExecutionStub, step: int, name: str
    ) -> pb.RunStepResult:
        try:
            result: pb.RunStepResult = await stub.RunStep(
                pb.RunStepRequest(step=step), timeout=self._step_timeout
            )
        except grpc.aio.AioRpcError as err:
            raise ReplicaExit(
                EXIT_FAILED, f"step {step} failed on {name}: {err.code().name}: {err.details()}"
            ) from err
        return result

    async def _write_outputs(self, layout: JobLayout, finished: tuple[int, float]) -> None:
        """metrics.json and the final weights (weights.npz: weight_<l>, bias_<l>)."""
        if not layout.model_dir:
            return
        arrays: dict[str, Array] = {}
        for layer in range(layout.config.num_layers):
            owner = layout.memoryx_of_layer(layer)
            stub = dataplane_pb2_grpc.WeightStreamingStub(self._channels.get(owner.address))
            request = pb.WeightsRequest(step=layout.num_steps, layer=layer)
            streamed = await collect_layer(stub.StreamWeights(request, timeout=self._step_timeout))
            arrays[f"weight_{layer}"] = streamed.tensors["weight"]
            arrays[f"bias_{layer}"] = streamed.tensors["bias"]
        step, loss = finished
        await asyncio.to_thread(write_model_dir, Path(layout.model_dir), step, loss, arrays)
        log.info("wrote metrics.json and weights.npz to %s", layout.model_dir)

    async def _shutdown_peers(self, layout: JobLayout, reason: str) -> None:
        async def shutdown(address: str) -> None:
            stub = dataplane_pb2_grpc.ReplicaLifecycleStub(self._channels.get(address))
            await stub.Shutdown(pb.ShutdownRequest(reason=reason), timeout=SHUTDOWN_TIMEOUT)

        peers = layout.others(self.replica)
        results = await asyncio.gather(
            *(shutdown(p.address) for p in peers), return_exceptions=True
        )
        for peer, result in zip(peers, results, strict=True):
            if isinstance(result, grpc.aio.AioRpcError):
                log.warning("could not shut down %s: %s", peer.name, result.code().name)
            elif isinstance(result, BaseException):
                log.warning("could not shut down %s: %r", peer.name, result)


def write_model_dir(model_dir: Path, step: int, loss: float, weights: dict[str, Array]) -> None:
    """Create the model directory; write metrics.json and weights.npz into it."""
    model_dir.mkdir(parents=True, exist_ok=True)
    # Any: numpy's stub cannot tell these names from its own `allow_pickle` keyword.
    arrays: dict[str, Any] = dict(weights)
    np.savez(model_dir / "weights.npz", **arrays)
    (model_dir / "metrics.json").write_text(json.dumps({"step": step, "loss": loss}) + "\n")
