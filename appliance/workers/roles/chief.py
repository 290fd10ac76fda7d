"""Chief: the per-job driver. Waits for its peers, configures them, runs the job, shuts down.

The loop itself (steps, clipping, updates, evaluation, summaries, checkpoints) is in
appliance.workers.roles.training_loop. Any failed or late data-plane call fails the job (exit 1)
after a best-effort Shutdown of the other replicas.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import grpc

from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import EXIT_FAILED, ReplicaExit, StopSignal
from appliance.workers.model_dir_runs import start_checkpoint
from appliance.workers.roles.training_loop import TrainingLoop
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import job_layout
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.peer_calls import PeerCalls

log = logging.getLogger(__name__)


class ChiefRole:
    """The chief role: serves only ReplicaLifecycle.Shutdown, drives everything else."""

    def __init__(self, replica: str, step_timeout: float, channels: PeerChannels) -> None:
        self.replica = replica
        self._step_timeout = step_timeout
        self._channels = channels

    def add_services(self, server: grpc.aio.Server) -> None:
        """The chief serves nothing besides ReplicaLifecycle."""

    def configure(self, layout: object) -> None:
        """The chief gets its topology from AwaitPeers, not from Configure."""

    async def close(self) -> None:
        TRACE.write("chief-0")
        await self._channels.close()

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        try:
            topology = await control.await_peers()
            layout = job_layout(topology)
            if layout.model_dir:  # which checkpoint; an earlier run's files set aside
                start = await asyncio.to_thread(start_checkpoint, layout, topology.attempt)
                if start:
                    log.info("attempt %d resumes from %s", topology.attempt, start)
                topology.resume_from = start  # what the peers are configured with
                layout = dataclasses.replace(layout, resume_from=start)
            control.set_data_plane(await self._channels.negotiate(layout.others(self.replica)))
            calls = PeerCalls(layout, self._channels, self._step_timeout)
            loop = TrainingLoop(layout, calls, control)
        except ValueError as err:
            raise ReplicaExit(EXIT_FAILED, f"unusable job: {err}") from err
        log.info(
            "%s: %d cs2, %d memoryx, %d swarmx; steps %d..%d of batch %d",
            layout.mode,
            len(layout.cs2),
            len(layout.memoryx),
            len(layout.swarmx),
            loop.start_step,
            layout.num_steps,
            layout.model.batch_size,
        )
        try:
            await calls.configure(topology, self.replica)
            metrics = await loop.run()
            if metrics is not None:
                log.info("finished: %s", metrics)
        except Exception:  # not on cancellation (SIGTERM): that must exit at once
            await calls.shutdown(self.replica, "the chief failed")
            raise
        await calls.shutdown(self.replica, "the job finished")
