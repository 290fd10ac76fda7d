"""What a weight-streaming CS-2 holds of the weights: the unit it computes on and one more.

The wafer holds activations, not the model (the appliance-mode article): weights stream in one
unit (layer) at a time, forward and again in reverse for backward
(appliance.domain.weight_schedule), and a unit is dropped as soon as its forward, head or backward
computation is done. A `UnitStream` takes the next unit off its gRPC stream only when fewer than
1 + PREFETCH_UNITS units are held, so at most one unit waits, decoded, while another is computed
on; the stream's later bytes wait in gRPC's flow-control window (the fabric, not the wafer).

The training stream carries every step's units; it takes a step's units only once that step's
RunStep has begun, so nothing of step k + 1 is held while an evaluation of the version after
step k streams its own units. `WaferWeights` counts the decoded weight bytes held and their
peak: the figure the CS-2 reports with every step (RunStepResult.peak_weight_bytes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from appliance.domain.wafer import STREAMED_UNITS_HELD
from appliance.workers.transport.tensors import LayerTensors

# Units decoded ahead of the one computed on: what compile counts a streaming CS-2 to hold
# (appliance.domain.wafer), less the one computed on.
PREFETCH_UNITS = STREAMED_UNITS_HELD - 1


def unit_bytes(layer: LayerTensors) -> int:
    return sum(int(array.nbytes) for array in layer.tensors.values())


class WaferWeights:
    """Weight bytes held on the CS-2 now, and the most held since the last `report`."""

    def __init__(self) -> None:
        self.held = 0
        self.peak = 0
        self.largest = 0  # the most ever held: what the CS-2 logs at its close

    def take(self, layer: LayerTensors) -> None:
        self.held += unit_bytes(layer)
        self.peak = max(self.peak, self.held)
        self.largest = max(self.largest, self.held)

    def drop(self, layer: LayerTensors) -> None:
        self.held -= unit_bytes(layer)

    def report(self) -> int:
        """The peak since the last report (a step's result carries it); starts a new one."""
        peak, self.peak = self.peak, self.held
        return peak


class UnitStream:
    """The units of one weight stream in the order they come, at most 1 + PREFETCH_UNITS held.

    `units_per_version` > 0 (the training stream) gates the reader: entry i belongs to version
    first + i // units_per_version, read only once `begin(version)` was called for it.
    """

    def __init__(
        self,
        layers: AsyncIterator[LayerTensors],
        wafer: WaferWeights,
        first: int = 0,
        units_per_version: int = 0,
    ) -> None:
        self._wafer = wafer
        self._first, self._per_version = first, units_per_version
        self._begun = first
        self._step_begun = asyncio.Condition()
        self._room = asyncio.Semaphore(1 + PREFETCH_UNITS)
        self._arrived: asyncio.Queue[LayerTensors | None] = asyncio.Queue()
        self._held: list[LayerTensors] = []
        self._taken = asyncio.Condition()  # notified as entries are taken
        self._entries_taken = 0
        self.reader: asyncio.Future[None] = asyncio.ensure_future(self._read(layers))

    async def begin(self, version: int) -> None:
        """Step `version` has begun: its units may come off the stream."""
        async with self._step_begun:
            self._begun = max(self._begun, version)
            self._step_begun.notify_all()

    async def _until_begun(self, version: int) -> None:
        async with self._step_begun:
            await self._step_begun.wait_for(lambda: self._begun >= version)

    async def _read(self, layers: AsyncIterator[LayerTensors]) -> None:
        entry = 0
        try:
            while True:
                if self._per_version:
                    await self._until_begun(self._first + entry // self._per_version)
                await self._room.acquire()
                try:
                    layer = await anext(layers)
                except StopAsyncIteration:
                    self._room.release()
                    return
                self._wafer.take(layer)
                self._held.append(layer)
                self._arrived.put_nowait(layer)
                entry += 1
        finally:
            self._arrived.put_nowait(None)

    def entry(self, version: int, place: int) -> int:
        """Which entry of the stream is `place` in the order of `version`'s units."""
        return (version - self._first) * self._per_version + place

    async def next(
        self,
        entry: int,
        version: int,
        unit: int,
        unless_ended: Callable[[Awaitable[LayerTensors | None]], Awaitable[LayerTensors | None]]
        | None = None,
    ) -> LayerTensors:
        """The stream's `entry`-th unit, which must be `unit` at `version`, once the entries
        before it were taken (a step's forward waits for the last step's backward); the
        reader's error if the stream failed or ended early, or (through `unless_ended`) the
        gradient push's if it failed first."""
        take = self._take(entry)
        here = self._entries_taken == entry and not self._arrived.empty()
        # A unit already here is taken even if the push failed meanwhile.
        layer = await (take if unless_ended is None or here else unless_ended(take))
        if layer is None:
            self._arrived.put_nowait(None)  # for whoever comes next
            await self.reader  # raises the stream's error, if any
            raise ValueError("the weight stream ended early")
        if (layer.step, layer.layer) != (version, unit):
            raise ValueError(
                f"expected unit {unit} at version {version}, got unit {layer.layer} at "
                f"{layer.step}"
            )
        return layer

    async def _take(self, entry: int) -> LayerTensors | None:
        """Entry `entry`, once every entry before it was taken (None: the stream ended)."""
        async with self._taken:
            await self._taken.wait_for(lambda: self._entries_taken >= entry)
            if self._entries_taken != entry:
                raise ValueError(f"unit {entry} of the weight stream taken twice")
            layer = await self._arrived.get()
            self._entries_taken += 1
            self._taken.notify_all()
        return layer

    def drop(self, layer: LayerTensors) -> None:
        """Done with the unit: its bytes leave the wafer and the reader may take the next."""
        self._held = [held for held in self._held if held is not layer]
        self._wafer.drop(layer)
        self._room.release()

    def close(self) -> None:
        """Stop reading; whatever is still held leaves the wafer."""
        self.reader.cancel()
        for layer in self._held:
            self._wafer.drop(layer)
        self._held.clear()
