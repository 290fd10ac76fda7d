"""Each CS-2's wafer: 40 GB by default, the pool's figure from APPLIANCE_WAFER_BYTES, a
system's own from the inventory file; out-of-range figures are refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from appliance.config.inventory import InventoryError, pool_of, read_inventory
from appliance.config.settings import Settings
from appliance.domain.inventory import Node, NodeKind


def wafers(pool: list[Node]) -> dict[str, int]:
    return {n.name: n.wafer_bytes for n in pool if n.kind is NodeKind.SYSTEM}


def test_a_cs2_holds_40_gb_unless_the_pool_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert set(wafers(pool_of(Settings(data_dir=tmp_path).inventory)).values()) == {40 * 10**9}
    monkeypatch.setenv("APPLIANCE_WAFER_BYTES", "20000000000")
    assert set(wafers(pool_of(Settings(data_dir=tmp_path).inventory)).values()) == {20 * 10**9}


@pytest.mark.parametrize("value", ["0", "-1", str(10**16)])
def test_a_wafer_out_of_range_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("APPLIANCE_WAFER_BYTES", value)
    with pytest.raises(pydantic.ValidationError, match="wafer_bytes"):
        Settings(data_dir=tmp_path)


def test_an_inventory_file_gives_a_system_its_own_wafer(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "systems: [a, {name: b, wafer_bytes: 8000000000}]\nmemoryx: [m]\nswarmx: [s]\n"
    )
    pool = read_inventory(path, memoryx_bytes=1 << 30, swarmx_ports=4, wafer_bytes=30 * 10**9)
    assert wafers(pool) == {"a": 30 * 10**9, "b": 8 * 10**9}


@pytest.mark.parametrize("entry", ["{name: b, wafer_bytes: 0}", "{name: b, wafer_bytes: x}"])
def test_a_systems_wafer_out_of_range_is_refused_naming_it(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"systems: [a, {entry}]\nmemoryx: [m]\nswarmx: [s]\n")
    with pytest.raises(InventoryError, match=r"systems\.1\..*wafer_bytes") as caught:
        read_inventory(path, memoryx_bytes=1 << 30, swarmx_ports=4)
    assert "\n" not in str(caught.value)
