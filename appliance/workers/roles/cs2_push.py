"""A CS-2's gradient push: one PushGradients call to its SwarmX for every training step.

The call is open before any gradient exists; a unit's chunks queue up as backward computes them
and gRPC takes them while backward carries on. While a step waits for its weights, a failed push
fails the step (the next version would never come: its gradients did not get through).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import TypeVar

from appliance.workers.transport.weight_rpc import WeightStreamingClient
from appliance.workers.transport.wire import WireChunk

_T = TypeVar("_T")


class GradientPush:
    """A PushGradients call, open before its gradients exist; chunks queue up."""

    def __init__(self, stub: WeightStreamingClient, timeout: float | None) -> None:
        self._ready: asyncio.Queue[WireChunk | None] = asyncio.Queue()
        self._taken = asyncio.Event()  # set while gRPC has taken every chunk sent so far
        self._call = asyncio.ensure_future(stub.push_gradients(self._chunks(), timeout))

    async def _chunks(self) -> AsyncIterator[WireChunk]:
        while (chunk := await self._ready.get()) is not None:
            if self._ready.empty():
                self._taken.set()
            yield chunk

    def send(self, chunks: Iterable[WireChunk]) -> None:
        for chunk in chunks:
            self._ready.put_nowait(chunk)
            self._taken.clear()

    async def taken(self) -> None:
        """Until gRPC has taken every chunk sent so far; raises if the call ended."""
        await self.unless_ended(self._taken.wait())

    async def unless_ended(self, awaitable: Awaitable[_T]) -> _T:
        """`awaitable`'s result, unless the call ends first: then its error. A push ends only
        when closed, so while a step waits for its weights a failed push fails the step (the
        next version would never come: its gradients did not get through)."""
        waiting = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait({waiting, self._call}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiting.done():
                waiting.cancel()
        if waiting.done():
            return waiting.result()
        self._call.result()  # raises the call's error
        raise ValueError("the gradient push ended early")

    async def close(self) -> None:
        """End the stream; returns once MemoryX has taken every layer (raises if it failed)."""
        self._ready.put_nowait(None)
        await self._call

    def cancel(self) -> None:
        self._call.cancel()
