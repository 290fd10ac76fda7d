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


def _with_workers(num_csx: int, workers: list[int], params_yaml: str) -> control_pb2.Topology:
    topology = _topology(num_csx=num_csx, memoryx=1, swarmx=1)
    topology.params_yaml = params_yaml
    topology.peers.extend(
        control_pb2.Peer(name=f"worker-{k}", role="worker", index=k, address=f"worker:{k}")
        for k in workers
    )
    return topology


DATA_SET = "train_input: {data_dir: /data/digits}\n"


def test_input_workers_feed_their_cs2_every_wth_step_and_are_shut_down_with_the_others() -> None:
    params = DATA_SET + "runconfig: {num_workers_per_csx: 2}\n"
    layout = job_layout(_with_workers(2, [3, 1, 0, 2], params))
    assert [w.name for w in layout.workers] == ["worker-0", "worker-1", "worker-2", "worker-3"]
    assert [layout.worker_of_step(1, s).name for s in range(4)] == [
        "worker-2", "worker-3", "worker-2", "worker-3"
    ]  # fmt: skip
    assert layout.feeds(training=True) and not layout.feeds(training=False)
    assert {"worker-0", "worker-3"} <= {p.name for p in layout.others("chief-0")}


@pytest.mark.parametrize(
    ("workers", "params", "message"),
    [
        ([0, 2], DATA_SET, "contiguous worker-0"),
        ([0], DATA_SET, "lists 1 input workers but the params need 2"),
        ([0, 1], "{}", "lists 2 input workers but the params need 0"),
    ],
)
def test_input_workers_must_match_the_params(
    workers: list[int], params: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        job_layout(_with_workers(2, workers, params))


def test_a_synthetic_job_has_no_workers_and_makes_its_own_batches() -> None:
    layout = job_layout(_topology(num_csx=2, memoryx=1, swarmx=1))
    assert layout.workers == () and not layout.feeds(training=True)
