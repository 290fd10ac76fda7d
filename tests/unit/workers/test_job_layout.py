"""The weight-streaming wiring derived from a Topology."""

from __future__ import annotations

import pytest

from appliance._proto.v1 import control_pb2
from appliance.workers.topology import job_layout


def _topology(num_csx: int, memoryx: int, swarmx: int) -> control_pb2.Topology:
    peers = [control_pb2.Peer(name="chief-0", role="chief", index=0, address="a:0")]
    for role, count in (("cs2", num_csx), ("memoryx", memoryx), ("swarmx", swarmx)):
        peers += [
            control_pb2.Peer(name=f"{role}-{i}", role=role, index=i, address=f"{role}:{i}")
            for i in reversed(range(count))
        ]
    return control_pb2.Topology(
        job_id="wsjob-test", num_csx=num_csx, num_steps=3, params_yaml="{}", peers=peers
    )


def test_cs2_map_to_swarmx_by_fanout_and_layers_to_memoryx_round_robin() -> None:
    layout = job_layout(_topology(num_csx=5, memoryx=2, swarmx=2))
    assert layout.fanout == 3
    assert [layout.swarmx_of_cs2(i).name for i in range(5)] == ["swarmx-0"] * 3 + ["swarmx-1"] * 2
    assert layout.cs2_of_swarmx(1) == [3, 4]
    assert [layout.memoryx_of_layer(i).name for i in range(3)] == [
        "memoryx-0",
        "memoryx-1",
        "memoryx-0",
    ]
    assert layout.layers_of_memoryx(0) == [0, 2]
    assert layout.feeding_swarmx() == [0, 1]
    assert "chief-0" not in {p.name for p in layout.others("chief-0")}


def test_swarmx_without_cs2_is_not_waited_for() -> None:
    layout = job_layout(_topology(num_csx=5, memoryx=1, swarmx=4))
    assert layout.fanout == 2
    assert layout.feeding_swarmx() == [0, 1, 2]


def test_incomplete_topology_is_rejected() -> None:
    with pytest.raises(ValueError, match="memoryx"):
        job_layout(_topology(num_csx=1, memoryx=0, swarmx=1))
