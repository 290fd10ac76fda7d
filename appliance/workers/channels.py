"""One gRPC channel per peer address, opened on first use and closed with the replica."""

from __future__ import annotations

import grpc

from appliance.workers.tensors import CHUNK_BYTES

# Room for one chunk plus its envelope.
_MESSAGE_LIMIT = 4 * CHUNK_BYTES
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MESSAGE_LIMIT),
    ("grpc.max_receive_message_length", _MESSAGE_LIMIT),
]


class PeerChannels:
    """Channels to the other replicas of the job, keyed by address."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
