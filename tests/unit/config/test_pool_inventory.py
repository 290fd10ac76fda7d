"""The pool the coordinator reads: the default's input-worker nodes, the counts' settings and
the inventory file's optional `workers` list."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.inventory import InventoryError, pool_of, read_inventory
from appliance.config.settings import Settings
from appliance.domain.inventory import Node, NodeKind


def kinds(pool: list[Node], kind: NodeKind) -> list[tuple[str, int]]:
    return [(n.name, n.capacity) for n in pool if n.kind is kind]


def test_the_default_pool_has_two_worker_nodes_of_8_slots(tmp_path: Path) -> None:
    pool = pool_of(Settings(data_dir=tmp_path).inventory)

    assert kinds(pool, NodeKind.WORKER) == [("worker-01", 8), ("worker-02", 8)]
    assert len(kinds(pool, NodeKind.SYSTEM)) == 4 and len(kinds(pool, NodeKind.SWARMX)) == 2


def test_worker_nodes_and_slots_are_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPLIANCE_WORKER_NODES", "3")
    monkeypatch.setenv("APPLIANCE_WORKER_SLOTS", "2")

    pool = pool_of(Settings(data_dir=tmp_path).inventory)

    assert kinds(pool, NodeKind.WORKER) == [(f"worker-0{i}", 2) for i in (1, 2, 3)]


def test_an_inventory_file_names_its_worker_nodes(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("systems: [a]\nmemoryx: [m]\nswarmx: [s]\nworkers: [cpu-1, cpu-2]\n")

    pool = read_inventory(path, memoryx_bytes=1 << 30, swarmx_ports=4, worker_slots=6)

    assert kinds(pool, NodeKind.WORKER) == [("cpu-1", 6), ("cpu-2", 6)]


def test_an_inventory_file_without_workers_has_none(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("systems: [a]\nmemoryx: [m]\nswarmx: [s]\n")

    pool = read_inventory(path, memoryx_bytes=1 << 30, swarmx_ports=4)

    assert kinds(pool, NodeKind.WORKER) == []


def test_a_worker_node_named_like_another_node_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("systems: [a]\nmemoryx: [m]\nswarmx: [s]\nworkers: [a]\n")

    with pytest.raises(InventoryError, match="names used twice: a"):
        read_inventory(path, memoryx_bytes=1 << 30, swarmx_ports=4)
