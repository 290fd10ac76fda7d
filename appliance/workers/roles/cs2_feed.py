"""A CS-2's input on a data set: its batches, streamed by its input workers.

The first training step opens one StreamTrainingBatches call to each of the CS-2's W workers,
for every step from it on: step s's batch comes from worker-(i * W + s % W) (JobLayout
.worker_of_step), each worker's batches in step order, arriving ahead of need (the worker
reads ahead, HTTP/2 carries what the window allows). An evaluation batch is one call. How long
the CS-2 waited for each training batch is a step-trace mark (cs2_batch_wanted, cs2_batch_in)
and adds to INPUT_WAIT, logged when the CS-2 closes (the benchmark's input wait share: the
time waited over the time of the training steps).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout, PeerAddress
from appliance.workers.transport.batches import FedBatch, read_batches
from appliance.workers.transport.channels import PeerChannels

_LANE = "input"  # a connection of its own: batches never queue behind weights
# Training batches a CS-2 keeps decoded ahead of its steps, per worker stream.
READ_AHEAD = 1


class FeedError(Exception):
    """A worker's call failed or sent something malformed; `code` is what RunStep answers."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class InputWait:
    """How long a CS-2 waited for its training batches, and how long its training steps took."""

    def __init__(self) -> None:
        self.batches = 0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0

    def report(self, log: logging.Logger) -> None:
        """Log the totals (the input-wait benchmark reads this line)."""
        share = self.wait_seconds / self.step_seconds if self.step_seconds else 0.0
        totals = {
            "batches": self.batches,
            "wait_seconds": round(self.wait_seconds, 6),
            "step_seconds": round(self.step_seconds, 6),
            "share": round(share, 6),
        }
        log.info("input wait: %s", json.dumps(totals))


INPUT_WAIT = InputWait()


class CS2Input:
    """Where one CS-2's batches come from on a data set: its input workers."""

    def __init__(
        self, layout: JobLayout, cs2_index: int, channels: PeerChannels, timeout: float
    ) -> None:
        self._layout = layout
        self._index = cs2_index
        self._channels = channels
        self._timeout = timeout
        self._training: TrainingFeed | None = None

    def feeds(self, evaluate: bool) -> bool:
        """Whether the step's batch comes from the workers (its section has a data_dir)."""
        return self._layout.feeds(training=not evaluate)

    async def batch(self, request: pb.RunStepRequest) -> FedBatch:
        """The step's (or evaluation batch's) shard; the first training step opens the
        streams of every training step."""
        if request.evaluate:
            return await eval_batch(
                self._layout, self._index, request.eval_batch, self._channels, self._timeout
            )
        if self._training is None:
            self._training = TrainingFeed(self._layout, self._index, request.step, self._channels)
        return await self._training.batch(request.step)

    def cancel(self) -> None:
        if self._training is not None:
            self._training.cancel()


class TrainingFeed:
    """The CS-2's training batches from `first` on, one stream from each of its workers.

    Each stream has a reader task that takes its worker's next batch off the wire and decodes
    it as soon as the previous one was taken (READ_AHEAD ready, one more decoded at most): the loop
    does that while the step waits for weights or gradients, so a step whose batch is in finds
    it ready and does not yield the loop to other work (the previous step's backward pass)
    before it starts. What the CS-2 waits for (INPUT_WAIT) is then only the batches not in yet.
    """

    def __init__(
        self, layout: JobLayout, cs2_index: int, first: int, channels: PeerChannels
    ) -> None:
        self._layout = layout
        self._index = cs2_index
        request = pb.TrainingBatchesRequest(start_step=first, num_steps=layout.num_steps)
        self._calls: dict[
            str, grpc.aio.UnaryStreamCall[pb.TrainingBatchesRequest, pb.BatchChunk]
        ] = {}
        self._ready: dict[str, asyncio.Queue[FedBatch | FeedError]] = {}
        self._readers: list[asyncio.Task[None]] = []
        per_cs2 = layout.workers_per_cs2
        for j in range(per_cs2):
            worker = layout.worker_of_step(cs2_index, first + j)
            stub = dataplane_pb2_grpc.InputFeedStub(channels.get(worker.address, _LANE))
            call = stub.StreamTrainingBatches(request, metadata=channels.metadata)
            self._calls[worker.name] = call
            ready: asyncio.Queue[FedBatch | FeedError] = asyncio.Queue(READ_AHEAD)
            self._ready[worker.name] = ready
            steps = range(first + j, layout.num_steps, per_cs2)
            batches = read_batches(_chunks(call))
            self._readers.append(asyncio.create_task(_read_ahead(worker, batches, steps, ready)))

    async def batch(self, step: int) -> FedBatch:
        """Step `step`'s batch (shard); raises FeedError if its worker failed."""
        worker = self._layout.worker_of_step(self._index, step)
        ready = self._ready[worker.name]
        TRACE.mark("cs2_batch_wanted", step)
        started = time.perf_counter()
        fed = ready.get_nowait() if not ready.empty() else await ready.get()
        INPUT_WAIT.wait_seconds += time.perf_counter() - started
        if isinstance(fed, FeedError):
            ready.put_nowait(fed)  # the stream is over: whoever asks next hears why too
            raise fed
        if fed.step != step:  # asked out of order: not the next step this worker serves
            raise FeedError(grpc.StatusCode.INTERNAL, f"{worker.name} has step {fed.step} next")
        INPUT_WAIT.batches += 1
        TRACE.mark("cs2_batch_in", step)
        return fed

    def cancel(self) -> None:
        for call in self._calls.values():
            call.cancel()
        for reader in self._readers:
            reader.cancel()


async def _read_ahead(
    worker: PeerAddress,
    batches: AsyncIterator[FedBatch],
    steps: range,
    ready: asyncio.Queue[FedBatch | FeedError],
) -> None:
    """Put each of `steps`' batches from `batches` into `ready` as it comes (in step order),
    or the FeedError that ended the stream."""
    for step in steps:
        try:
            fed = await _next(worker, batches, step)
        except FeedError as err:
            await ready.put(err)
            return
        await ready.put(fed)


async def eval_batch(
    layout: JobLayout, cs2_index: int, index: int, channels: PeerChannels, deadline: float
) -> FedBatch:
    """The CS-2's shard of evaluation batch `index`; raises FeedError if its worker failed."""
    worker = layout.worker_of_step(cs2_index, index)
    stub = dataplane_pb2_grpc.InputFeedStub(channels.get(worker.address, _LANE))
    call = stub.StreamEvalBatch(
        pb.EvalBatchRequest(index=index), timeout=deadline, metadata=channels.metadata
    )
    try:
        return await _next(worker, read_batches(_chunks(call)), index)
    finally:
        call.cancel()


async def _chunks(
    call: grpc.aio.UnaryStreamCall[pb.TrainingBatchesRequest, pb.BatchChunk]
    | grpc.aio.UnaryStreamCall[pb.EvalBatchRequest, pb.BatchChunk],
) -> AsyncIterator[pb.BatchChunk]:
    async for chunk in call:
        yield chunk


async def _next(worker: PeerAddress, batches: AsyncIterator[FedBatch], step: int) -> FedBatch:
    """The next batch of a worker's stream, which must be `step`'s."""
    try:
        fed = await anext(batches)
    except grpc.aio.AioRpcError as err:
        raise FeedError(err.code(), f"{worker.name}: {err.details()}") from err
    except StopAsyncIteration:
        raise FeedError(grpc.StatusCode.INTERNAL, f"{worker.name}'s batches ended") from None
    except ValueError as err:
        raise FeedError(grpc.StatusCode.INTERNAL, f"{worker.name}: {err}") from err
    if fed.step != step:
        raise FeedError(
            grpc.StatusCode.INTERNAL, f"{worker.name} sent step {fed.step}'s batch, not {step}'s"
        )
    return fed
