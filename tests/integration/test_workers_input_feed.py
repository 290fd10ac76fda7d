"""An input worker's InputFeed under a slow consumer, through a real gRPC server on 127.0.0.1.

A CS-2-like consumer (the CS-2's channel options, its stream decoder) takes the training batches
of a stream one at a time and takes the next only once the worker has read as far ahead as it
may: the worker never reads more than train_input.prefetch_factor batches beyond what it has
handed to gRPC, nor more than that plus what HTTP/2's window holds in transit beyond what the
consumer took. Reads are counted in the data set (a DataSet wrapper: our own seam).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import yaml

from appliance._proto.v1 import common_pb2, control_pb2, dataplane_pb2_grpc
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.domain.params import InputSection, Params
from appliance.workers.data.dataset import DataSet
from appliance.workers.models.model import Batch
from appliance.workers.roles import input_worker
from appliance.workers.roles.cs2_feed import TrainingFeed
from appliance.workers.roles.input_worker import InputWorkerRole
from appliance.workers.topology import job_layout
from appliance.workers.transport.batches import read_batches
from appliance.workers.transport.channels import CHANNEL_OPTIONS, PeerChannels
from appliance.workers.transport.tensors import CHUNK_BYTES
from tests.data_sets import write_digits

pytest.importorskip("sklearn.datasets")

WINDOW = 16 * CHUNK_BYTES  # the CS-2's stream window (channels.CHANNEL_OPTIONS' lookahead)


class CountingSet:
    """A data set that counts its reads (and the samples read)."""

    def __init__(self, inner: DataSet) -> None:
        self.inner = inner
        self.name = inner.name
        self.lock = threading.Lock()
        self.reads = 0
        self.probed = False  # the one-sample read DataSource.of sizes a sample by

    def __len__(self) -> int:
        return len(self.inner)

    def read(self, indices: npt.NDArray[np.int64]) -> Batch:
        with self.lock:
            if not self.probed and len(indices) == 1:
                self.probed = True  # not a batch read ahead
            else:
                self.reads += 1
        return self.inner.read(indices)


async def poll(predicate: Any, within: float = 30.0) -> None:
    """Poll a real condition until it holds (the condition is the synchronisation)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110  # the reads happen in the worker's threads
            await asyncio.sleep(0.005)


def digits_job(root: Path, batch_size: int, prefetch: int) -> control_pb2.Topology:
    train, _ = write_digits(root, size=28)  # 784 float32 inputs a sample: 3,136 bytes
    params = {
        "model": {"name": "fc_mnist", "input_size": 784, "hidden_sizes": [16], "num_classes": 10},
        "train_input": {
            "data_dir": str(train),
            "data_processor": "MNISTDataProcessor",
            "batch_size": batch_size,
            "prefetch_factor": prefetch,
        },
        "runconfig": {"seed": 1},
    }
    peers = [
        control_pb2.Peer(name=f"{role}-0", role=role, index=0, address="127.0.0.1:1")
        for role in ("chief", "cs2", "memoryx", "swarmx", "worker")
    ]
    return control_pb2.Topology(
        job_id="wsjob-feed", params_yaml=yaml.safe_dump(params), num_csx=1, num_steps=200,
        mode=common_pb2.MODE_TRAIN, model_dir=str(root / "model"), peers=peers,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def serving_worker(
    topology: control_pb2.Topology, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[InputWorkerRole, list[CountingSet], str]]:
    """worker-0 of the job, its data sets wrapped to count reads, on a real gRPC server."""
    opened: list[CountingSet] = []
    real_open = input_worker.open_data_set

    def counting_open(section: InputSection, params: Params) -> DataSet:
        opened.append(CountingSet(real_open(section, params)))
        return opened[-1]

    monkeypatch.setattr(input_worker, "open_data_set", counting_open)
    role = InputWorkerRole(0)
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    role.add_services(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    role.configure(job_layout(topology))
    running = asyncio.create_task(role.run(None, None))  # type: ignore[arg-type]
    try:
        yield role, opened, f"127.0.0.1:{port}"
    finally:
        running.cancel()
        await server.stop(0)


@pytest.mark.parametrize("batch_size", [1400, 64])
async def test_a_slow_consumer_holds_the_worker_to_its_prefetch_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    prefetch = 2
    topology = digits_job(tmp_path, batch_size, prefetch)
    batch_bytes = batch_size * 784 * 4
    in_transit = math.ceil(WINDOW / batch_bytes) + 1  # the window, and one being written
    async with serving_worker(topology, monkeypatch) as (role, opened, address):
        channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        call = dataplane_pb2_grpc.InputFeedStub(channel).StreamTrainingBatches(
            pb.TrainingBatchesRequest(start_step=0, num_steps=topology.num_steps)
        )
        batches = read_batches(aiter(call))
        most_ahead = 0
        for step in range(40):
            # Take the next batch only once the worker has read all it may ahead of it.
            await poll(lambda wanted=step + prefetch: bool(opened) and opened[0].reads >= wanted)
            fed = await anext(batches)
            assert fed.step == step and fed.batch.num_samples == batch_size
            taken = step + 1
            reads = opened[0].reads
            assert reads <= role.batches_sent + prefetch
            most_ahead = max(most_ahead, reads - taken)
        call.cancel()
        await channel.close()
    print(f"batches of {batch_bytes} bytes: the worker read at most {most_ahead} batches ahead "
          f"of the consumer ({in_transit} may be in transit, {prefetch} prefetched)")  # fmt: skip
    assert most_ahead <= in_transit + prefetch


async def test_a_cs2_takes_a_batch_already_in_without_yielding_its_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CS-2 decodes its next batch ahead (cs2_feed.TrainingFeed): once it is in, the step
    that wants it gets it at once, without handing the event loop to other work first."""
    topology = digits_job(tmp_path, 64, prefetch=2)
    async with serving_worker(topology, monkeypatch) as (role, _, address):
        for peer in topology.peers:
            peer.address = address
        channels = PeerChannels("")
        feed = TrainingFeed(job_layout(topology), 0, 0, channels)  # cs2-0 from step 0
        try:
            for step in range(5):
                # The worker sent the step's batch (and the next); the CS-2 decoded it.
                queues = list(getattr(feed, "_ready", {}).values())
                await poll(
                    lambda s=step, q=queues: role.batches_sent > s + 1 and all(r.full() for r in q)
                )
                taking = feed.batch(step)
                with pytest.raises(StopIteration) as taken:
                    taking.send(None)  # it finishes without suspending
                fed = taken.value.value
                assert fed.step == step and fed.batch.num_samples == 64
        finally:
            feed.cancel()
            await channels.close()
