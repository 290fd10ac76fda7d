"""Input worker: reads the job's data set and streams each CS-2 its shard of the batches.

worker-k serves CS-2 i = k // W (W = runconfig.num_workers_per_csx) the steps s with
s % W == k % W: for each, the sample indices of global batch s (appliance.workers.data.order:
a pure function of the data set's size, the seed and the epoch, so N CS-2s see the batches one
would, and a resumed attempt reads from its first step on with no state carried over), split
as Batch.shard(i, N) splits a batch, and only CS-2 i's rows read. Reader threads
(train_input.num_workers, at least one) read at most prefetch_factor batches ahead of what
gRPC has taken, fewer when those would pass PREFETCH_BYTES (roles/input_prefetch.py); flow
control holds the writes back when the CS-2 does not keep up. Evaluation batches come one
call each, from eval_input's data set.

The data sets are opened once the chief has configured the worker: a DataError (or any other
failure to open or read) ends the worker with exit 1 and that error as its last line, so the
job's reason names the file and what is wrong; a stream it was serving is aborted with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator

import grpc
import numpy as np

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.domain.params import InputSection
from appliance.domain.replica_errors import error_of
from appliance.workers.control import ControlPlane
from appliance.workers.data.dataset import DataSet, open_data_set
from appliance.workers.data.order import InputOrder, input_order
from appliance.workers.lifecycle import StopSignal
from appliance.workers.models.model import Batch
from appliance.workers.roles.input_prefetch import Prefetcher, depth_within
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout
from appliance.workers.transport.batches import FedBatch, encode_batch

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DataSource:
    """One section's data set, the order of its batches, and the CS-2 shard this worker reads."""

    data_set: DataSet
    order: InputOrder
    shard: int
    num_shards: int
    sample_bytes: int  # one sample's inputs and targets, as read

    @classmethod
    def of(cls, data_set: DataSet, order: InputOrder, shard: int, num_shards: int) -> DataSource:
        one = data_set.read(np.zeros(1, dtype=np.int64))
        return cls(data_set, order, shard, num_shards, one.inputs.nbytes + one.targets.nbytes)

    def prefetch_depth(self, wanted: int) -> int:
        """`wanted` batches ahead, fewer when their shards would pass PREFETCH_BYTES."""
        rows = -(-min(self.order.batch_size, self.order.num_samples) // self.num_shards)
        return depth_within(wanted, rows * self.sample_bytes)

    def position(self, step: int) -> pb.InputPosition:
        where = self.order.position(step)
        seed = self.order.seed if self.order.shuffle else 0
        return pb.InputPosition(epoch=where.epoch, offset=where.offset, seed=seed)

    def read(self, step: int) -> FedBatch:
        """This worker's CS-2's shard of global batch `step` (only its rows are read)."""
        indices, _ = self.order.batch(step)
        rows = np.array_split(indices, self.num_shards)[self.shard]
        if len(rows):
            batch = self.data_set.read(rows)
        else:  # more CS-2s than samples in the batch: an empty shard of the right kind
            first = self.data_set.read(indices[:1])
            batch = Batch(first.inputs[:0], first.targets[:0])
        if batch.num_samples != len(rows):
            raise ValueError(f"{self.data_set.name} gave {batch.num_samples} of {len(rows)} rows")
        return FedBatch(step, batch, self.position(step), self.position(step + 1), len(indices))


def open_source(
    section: InputSection, layout: JobLayout, shard: int, training: bool
) -> DataSource:
    """Open `section`'s data set and its order; DataError if it cannot be read."""
    data_set = open_data_set(section, layout.params)
    order = input_order(section, layout.params, len(data_set), training=training)
    return DataSource.of(data_set, order, shard, len(layout.cs2))


class InputWorkerRole(dataplane_pb2_grpc.InputFeedServicer):
    """The worker role: an InputFeed servicer over the job's data sets."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()
        self._opened = asyncio.Event()  # the data sets are open, or failed to
        self._failed = asyncio.Event()
        self._failure: BaseException | None = None
        self._train: DataSource | None = None
        self._eval: DataSource | None = None
        self.batches_sent = 0

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_InputFeedServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            if self.index >= len(layout.workers):
                raise ValueError(f"worker-{self.index} is not among the job's input workers")
            self._layout = layout
            self._configured.set()

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        shard = self.index // layout.params.runconfig.num_workers_per_csx
        try:
            self._train, self._eval = await asyncio.to_thread(_open_sources, layout, shard)
        except Exception as err:
            self._fail(err)
            raise
        finally:
            self._opened.set()
        for kind, source in (("train", self._train), ("eval", self._eval)):
            if source is not None:
                log.info("serving cs2-%d's shard of %s batches of %s (%d samples)", shard, kind,
                         source.data_set.name, len(source.data_set))  # fmt: skip
        await self._failed.wait()
        assert self._failure is not None
        raise self._failure

    async def close(self) -> None:
        log.info("input batches sent: %d", self.batches_sent)
        TRACE.write(f"worker-{self.index}")

    async def StreamTrainingBatches(
        self, request: pb.TrainingBatchesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.BatchChunk]:
        source = await self._source("train_input", context)
        layout = self._layout
        assert layout is not None
        if not 0 <= request.start_step <= request.num_steps <= layout.num_steps:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"steps {request.start_step}..{request.num_steps} are not within the job's "
                f"{layout.num_steps}",
            )
        workers = layout.params.runconfig.num_workers_per_csx
        mine = self.index % workers
        first = request.start_step + (mine - request.start_step) % workers
        section = layout.params.train_input
        prefetcher = Prefetcher(
            source.read,
            range(first, request.num_steps, workers),
            source.prefetch_depth(section.prefetch_factor),
            max(1, section.num_workers),
        )
        try:
            while True:
                try:
                    step, fed = await prefetcher.next()
                except StopAsyncIteration:
                    return
                except Exception as err:
                    await self._abort(err, context)
                TRACE.mark("worker_batch_out", step)
                for chunk in encode_batch(fed):
                    yield chunk
                prefetcher.release()
                self.batches_sent += 1
        finally:
            prefetcher.close()

    async def StreamEvalBatch(
        self, request: pb.EvalBatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.BatchChunk]:
        source = await self._source("eval_input", context)
        if not 0 <= request.index < 1 << 40:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "eval batch out of range")
        try:
            fed = await asyncio.to_thread(source.read, request.index)
        except Exception as err:
            await self._abort(err, context)
        for chunk in encode_batch(fed):
            yield chunk
        self.batches_sent += 1

    async def DescribeEvalSet(
        self, request: pb.DescribeEvalSetRequest, context: grpc.aio.ServicerContext
    ) -> pb.EvalSetDescription:
        source = await self._source("eval_input", context)
        return pb.EvalSetDescription(
            num_samples=len(source.data_set), batches_per_epoch=source.order.batches_per_epoch
        )

    async def _source(self, section: str, context: grpc.aio.ServicerContext) -> DataSource:
        """The section's data source, once open (they open after Configure)."""
        await self._opened.wait()
        source = self._train if section == "train_input" else self._eval
        if self._failure is not None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                error_of(self._failure),
            )
        if source is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no data set for {section} (no data_dir)",
            )
        assert source is not None
        return source

    async def _abort(self, err: Exception, context: grpc.aio.ServicerContext) -> None:
        """Fail the worker with `err` (its last error line) and abort the call with it (the CS-2
        names the worker: its reason reads `worker-k: DataError: <file>: ...`)."""
        log.error("reading failed: %s", err, exc_info=err)
        self._fail(err)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, error_of(err))

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
            self._failed.set()


def _open_sources(layout: JobLayout, shard: int) -> tuple[DataSource | None, DataSource | None]:
    """The training and evaluation data sources the job's mode reads, where a data_dir is
    given."""
    params = layout.params
    train = eval_ = None
    if layout.mode != "eval" and params.train_input.data_dir:
        train = open_source(params.train_input, layout, shard, training=True)
    if layout.mode != "train" and params.eval_input.data_dir:
        eval_ = open_source(params.eval_input, layout, shard, training=False)
    return train, eval_
