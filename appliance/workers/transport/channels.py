"""A channel per peer: through shared memory to a co-located peer, else gRPC (opened on first
use); both closed with the replica. The channel (and server) options tuned for tensor streams.

Which transport reaches a peer is settled at Configure (`negotiate`): a replica serves its
job's co-located peers on an abstract Unix socket whose name only the job's credential gives
(`local_address`); a peer that answers there with a link (local_link.py) is on this host and
of this job and attempt, and every later call to it goes through shared memory. A peer that
does not (another host, another network namespace, shared memory turned off on either side)
is reached over gRPC. Nothing else changes for the roles: both are grpc.aio channels.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

import grpc

from appliance.workers.topology import PeerAddress
from appliance.workers.transport.job_credential import call_metadata
from appliance.workers.transport.local_channel import LocalChannel
from appliance.workers.transport.replica_tls import ReplicaTls
from appliance.workers.transport.tensors import CHUNK_BYTES
from appliance.workers.transport.weight_rpc import WeightStreamingClient

log = logging.getLogger(__name__)

# Room for one chunk plus its envelope.
_MESSAGE_LIMIT = 4 * CHUNK_BYTES
# Tensor streams move megabytes per step between processes on one host. A large fixed HTTP/2
# window (instead of BDP probing, which starts at 64 KiB and grows it step by step) and large
# TCP reads halve gRPC's CPU time and latency per megabyte (measured on loopback).
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MESSAGE_LIMIT),
    ("grpc.max_receive_message_length", _MESSAGE_LIMIT),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 16 * CHUNK_BYTES),
    ("grpc.experimental.tcp_read_chunk_size", 4 * CHUNK_BYTES),
    ("grpc.experimental.tcp_min_read_chunk_size", CHUNK_BYTES),
    ("grpc.experimental.tcp_max_read_chunk_size", 8 * CHUNK_BYTES),
    # A connection per channel: channels with equal options would otherwise share one.
    ("grpc.use_local_subchannel_pool", 1),
]


class PeerChannels:
    """Channels to the other replicas of the job, keyed by address and lane.

    Each lane is its own TCP connection: a small answer (a gradient push's ack) on the
    "gradients" lane never queues behind a megabyte of weights on the "weights" lane.
    Every call on them carries `metadata`: the job's data-plane credential (job_credential.py).
    """

    def __init__(
        self, token: str, shared_memory: bool = False, tls: ReplicaTls | None = None
    ) -> None:
        self.metadata = call_metadata(token)
        self._token = token
        self._tls = tls
        self.shared_memory = shared_memory
        self._channels: dict[tuple[str, str], grpc.aio.Channel] = {}
        self._local: dict[str, LocalChannel] = {}  # by address

    async def negotiate(self, peers: list[PeerAddress]) -> str:
        """Find which of `peers` answer on their local sockets; say which transport reaches
        which peer (logged, and shown in the job's replica detail)."""
        local: list[str] = []
        remote: list[str] = []
        for peer in peers:
            if self.shared_memory and peer.address not in self._local:
                channel = LocalChannel(local_address(self._token, peer.name), self._token)
                try:
                    await channel.channel_ready()
                except grpc.aio.AioRpcError as err:
                    log.info(
                        "%s is not reachable through shared memory: %s", peer.name, err.details()
                    )
                else:
                    self._local[peer.address] = channel
            (local if peer.address in self._local else remote).append(peer.name)
        log.info("data plane: %s", describe_transports(local, remote, self.shared_memory, None))
        return describe_transports(local, remote, self.shared_memory)

    def get(self, address: str, lane: str = "") -> grpc.aio.Channel:
        local = self._local.get(address)
        if local is not None:
            return local
        channel = self._channels.get((address, lane))
        if channel is None:
            channel = self._dial(address)
            self._channels[address, lane] = channel
        return channel

    def _dial(self, address: str) -> grpc.aio.Channel:
        """Mutual TLS with this replica's certificate, the peer verified as one of the job's
        attempt (replica_tls.py); plaintext when the coordinator gave no certificate."""
        if self._tls is None:
            return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        options = [*CHANNEL_OPTIONS, *self._tls.channel_options()]
        return grpc.aio.secure_channel(address, self._tls.channel_credentials(), options=options)

    def weight_streaming(self, address: str, lane: str = "") -> WeightStreamingClient:
        """WeightStreaming calls to the peer at `address`, on `lane`."""
        return WeightStreamingClient(self.get(address, lane), self.metadata)

    async def close(self) -> None:
        for channel in [*self._channels.values(), *self._local.values()]:
            await channel.close()
        self._channels.clear()
        self._local.clear()


def local_address(token: str, replica: str) -> str:
    """The abstract Unix socket `replica` of the job (and attempt) whose data-plane credential
    is `token` serves its co-located peers on. No file: the kernel drops the name when the
    replica's socket closes, however the replica ends."""
    digest = hmac.new(token.encode(), f"local-socket\0{replica}".encode(), hashlib.sha256)
    return f"\0appliance-dataplane-{digest.hexdigest()[:40]}"


def describe_transports(
    local: list[str], remote: list[str], shared_memory: bool, most: int | None = 6
) -> str:
    """`shared memory: cs2-0, swarmx-0; grpc: worker-0`; past `most` names a list is
    shortened to its count and first names, so the line stays short whatever the job's size."""
    parts = []
    if local:
        parts.append(f"shared memory: {_names(local, most)}")
    if remote:
        off = "" if shared_memory else " (shared memory off)"
        parts.append(f"grpc{off}: {_names(remote, most)}")
    return "; ".join(parts) or "no peers"


def _names(names: list[str], most: int | None) -> str:
    if most is None or len(names) <= most:
        return ", ".join(names)
    return f"{len(names)} replicas ({', '.join(names[:3])}, ...)"
