"""The pool by name: the inventory file (APPLIANCE_INVENTORY_FILE), as the Helm chart's ConfigMap
writes it, read into nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from appliance.config.groups import PoolSettings
from appliance.domain.inventory import Node, default_pool, named_pool
from appliance.domain.wafer import MAX_WAFER_BYTES, WAFER_BYTES


class SystemEntry(BaseModel):
    """A system with its own wafer: `{name: cs2-05, wafer_bytes: 20000000000}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    wafer_bytes: int | None = Field(default=None, gt=0, le=MAX_WAFER_BYTES)


class InventoryFile(BaseModel):
    """The pool by name, as the Helm chart's ConfigMap writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A system by name (the pool's wafer size), or with its own wafer_bytes.
    systems: list[SystemEntry] = Field(min_length=1)
    memoryx: list[str] = Field(min_length=1)
    swarmx: list[str] = Field(min_length=1)
    # Input-worker nodes (optional: a pool without them runs synthetic-data jobs only).
    workers: list[str] = []

    @field_validator("systems", mode="before")
    @classmethod
    def _names_are_entries(cls, value: Any) -> Any:
        """A plain name is a system with the pool's wafer."""
        if not isinstance(value, list):
            return value
        return [{"name": v} if isinstance(v, str) else v for v in value]


class InventoryError(ValueError):
    """The inventory file cannot be used; the message says what to fix."""


def read_inventory(
    path: Path,
    *,
    memoryx_bytes: int,
    swarmx_ports: int,
    worker_slots: int = 8,
    wafer_bytes: int = WAFER_BYTES,
) -> list[Node]:
    """Read an inventory YAML (`systems:`, `memoryx:`, `swarmx:` and optionally `workers:`
    lists of node names)."""
    try:
        raw = yaml.safe_load(path.read_text())
        inventory = InventoryFile.model_validate(raw)
    except OSError as e:
        raise InventoryError(f"cannot read the inventory file {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InventoryError(f"inventory file {path} is not YAML: {e}") from e
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InventoryError(
            f"inventory file {path}: {where}: {first['msg']} "
            "(expected lists of names under systems, memoryx, swarmx and workers)"
        ) from e
    systems = [s.name for s in inventory.systems]
    wafers = {s.name: s.wafer_bytes for s in inventory.systems if s.wafer_bytes is not None}
    names = systems + inventory.memoryx + inventory.swarmx + inventory.workers
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise InventoryError(f"inventory file {path}: names used twice: {', '.join(duplicated)}")
    return named_pool(
        systems,
        inventory.memoryx,
        inventory.swarmx,
        memoryx_bytes=memoryx_bytes,
        swarmx_ports=swarmx_ports,
        workers=inventory.workers,
        worker_slots=worker_slots,
        wafer_bytes=wafer_bytes,
        wafers=wafers,
    )


def pool_of(pool: PoolSettings) -> list[Node]:
    """The nodes of `pool`: named by its inventory file, else as many as its counts say."""
    if pool.inventory_file is not None:
        return read_inventory(
            pool.inventory_file,
            memoryx_bytes=pool.memoryx_bytes,
            swarmx_ports=pool.swarmx_ports,
            worker_slots=pool.worker_slots,
            wafer_bytes=pool.wafer_bytes,
        )
    return default_pool(
        systems=pool.systems,
        memoryx=pool.memoryx_nodes,
        swarmx=pool.swarmx_nodes,
        memoryx_bytes=pool.memoryx_bytes,
        swarmx_ports=pool.swarmx_ports,
        workers=pool.worker_nodes,
        worker_slots=pool.worker_slots,
        wafer_bytes=pool.wafer_bytes,
    )
