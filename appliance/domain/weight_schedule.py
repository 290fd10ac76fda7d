"""The order in which weights are broadcast to a CS-2 in weight streaming, one unit at a time.

As the appliance-mode article describes it: a training step streams the units forward, first to
last, then (after the loss and the first gradient) streams them again last to first for the
backward pass. A head that reads another unit's tensors (a tied LM head reads the token
embeddings) gets them streamed again between the two passes. An evaluation step streams the
forward pass and the head's units only. A CS-2 holds the unit it computes on and a bounded
prefetch of the next, never the whole model; compile counts these bytes.
"""

from __future__ import annotations


def forward_order(num_units: int, head_units: tuple[int, ...]) -> list[int]:
    """Units in the order a forward pass (with its head) takes them: 0..U-1, then the head's
    tied units (those other than the last, which the CS-2 has just computed on)."""
    last = num_units - 1
    return [*range(num_units), *(u for u in head_units if u != last)]


def training_order(num_units: int, head_units: tuple[int, ...]) -> list[int]:
    """Units in the order one training step takes them: the forward pass, then every unit
    again in reverse for backward (each unit appears two or three times)."""
    return [*forward_order(num_units, head_units), *reversed(range(num_units))]


def occurrences(order: list[int]) -> list[tuple[int, int]]:
    """Each entry of `order` as (unit, how many times the unit came before it): the key that
    tells a unit's forward broadcast from its backward one."""
    seen: dict[int, int] = {}
    keys = []
    for unit in order:
        keys.append((unit, seen.get(unit, 0)))
        seen[unit] = seen.get(unit, 0) + 1
    return keys
