"""Kubernetes resource quantities as numbers (pure): CPU in millicores, memory in bytes.

Only the forms the settings accept (appliance/config/kube.py) and node status uses: plain or
decimal numbers, `m` for CPU, decimal (k, M, G, T) and binary (Ki, Mi, Gi, Ti) suffixes.
"""

from __future__ import annotations

_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50}  # fmt: skip


def memory_bytes(quantity: str) -> float:
    """A memory quantity in bytes: 512Mi, 4Gi, 1000000 (ValueError for other forms)."""
    number = quantity.rstrip("kKMGTPi")
    suffix = quantity[len(number) :]
    if suffix not in _UNITS:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return float(number) * _UNITS[suffix]


def cpu_millis(quantity: str) -> float:
    """A CPU quantity in millicores: 250m, 2, 1.5 (ValueError for other forms)."""
    if quantity.endswith("m"):
        return float(quantity[:-1])
    if quantity.endswith("n"):  # node status may say nanocores
        return float(quantity[:-1]) / 1e6
    if quantity.endswith("u"):
        return float(quantity[:-1]) / 1e3
    return float(quantity) * 1000
