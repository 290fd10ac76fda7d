"""`csctl get systems`, `get nodes` and `get nodegroups`."""

from __future__ import annotations

import json
import time

import pytest
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from csctl.render import format_bytes


@pytest.fixture
def busy(cluster: FakeCluster) -> FakeCluster:
    nodes = {node.name: node for node in cluster.service.nodes}
    nodes["cs2-01"].used = 1
    nodes["cs2-01"].jobs.append("wsjob-a")
    nodes["cs2-02"].state = "maintenance"
    nodes["cs2-03"].state = "error"
    nodes["cs2-03"].reason = "fan"
    nodes["cs2-03"].since = time.time() - 300
    nodes["cs2-04"].reservation = "fan-swap"
    nodes["memx-01"].used = 3 << 29  # 1.5 GiB
    nodes["memx-01"].jobs.append("wsjob-a")
    nodes["swarmx-01"].used = 1
    nodes["swarmx-01"].jobs.extend(["wsjob-a", "wsjob-b"])
    nodes["worker-01"].used = 2  # wsjob-a's two input workers
    nodes["worker-01"].jobs.append("wsjob-a")
    return cluster


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0"), (512, "512"), (1024, "1Ki"), (3 << 29, "1.5Gi"), (16 << 30, "16Gi"),
     (5 << 40, "5Ti")],
)  # fmt: skip
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text


def test_get_systems(csctl: Csctl, busy: FakeCluster) -> None:
    result = csctl("get", "systems")

    assert result.exit_code == 0, result.output
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["NAME", "STATE", "SINCE", "JOB", "RESERVATION", "REASON"],
        ["cs2-01", "in-use", "-", "wsjob-a", "-"],
        ["cs2-02", "maintenance", "-", "-"],
        ["cs2-03", "error", "5m", "ago", "-", "fan"],
        ["cs2-04", "ok", "-", "fan-swap"],
    ]


def test_get_nodes_in_human_units(csctl: Csctl, busy: FakeCluster) -> None:
    result = csctl("get", "nodes")

    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()}
    assert rows["NAME"] == ["NAME", "KIND", "STATE", "USED/CAPACITY", "JOBS", "REASON"]
    assert rows["cs2-03"] == ["cs2-03", "system", "error", "0/1", "fan"]
    assert rows["cs2-01"] == ["cs2-01", "system", "ok", "1/1", "wsjob-a"]
    assert rows["memx-01"] == ["memx-01", "memoryx", "ok", "1.5Gi/16Gi", "wsjob-a"]
    assert rows["swarmx-01"] == ["swarmx-01", "swarmx", "ok", "1/4", "wsjob-a,wsjob-b"]
    assert rows["worker-01"] == ["worker-01", "worker", "ok", "2/8", "wsjob-a"]
    assert rows["worker-02"] == ["worker-02", "worker", "ok", "0/8"]
    assert len(rows) == 13


def test_get_nodes_as_json(csctl: Csctl, busy: FakeCluster) -> None:
    nodes = json.loads(csctl("get", "nodes", "-o", "json").stdout)

    assert nodes[0] == {"name": "cs2-01", "kind": "system", "state": "ok", "capacity": 1,
                        "used": 1, "jobs": ["wsjob-a"], "reason": "", "since": None,
                        "reservation": ""}  # fmt: skip
    # A moment not happened (never changed) is null, as the REST API writes it.


def test_get_nodegroups_counts_and_free_capacity(csctl: Csctl, busy: FakeCluster) -> None:
    result = csctl("get", "nodegroups")

    assert [line.split() for line in result.stdout.splitlines()] == [
        ["NODEGROUP", "NODES", "OK", "ERROR", "MAINTENANCE", "DRAIN", "FREE/CAPACITY"],
        ["system", "4", "2", "1", "1", "0", "1/4"],
        ["memoryx", "4", "4", "0", "0", "0", "62.5Gi/64Gi"],
        ["swarmx", "2", "2", "0", "0", "0", "7/8"],
        ["worker", "2", "2", "0", "0", "0", "14/16"],
    ]


def test_nodes_of_an_unreachable_server_exit_1(dead_csctl: Csctl) -> None:
    assert dead_csctl("get", "nodes").exit_code == 1
