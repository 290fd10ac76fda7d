"""`csctl reservation create|list` against the fake cluster: what it sends, what it shows."""

from __future__ import annotations

import time

import pytest
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.domain.errors import InvalidSpec
from csctl.reservations import parse_moment, parse_nodes


def test_create_sends_the_window_and_nodes_and_list_shows_them(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    before = time.time()
    result = csctl(
        "reservation", "create", "fan-swap", "--maint", "--systems", "cs2-02,cs2-03",
        "--start", "now+60", "--duration", "2:00:00",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("reservation/fan-swap created: cs2-02,cs2-03 from ")
    [sent] = cluster.service.requests_of("CreateReservation")
    assert isinstance(sent, cluster_pb2.CreateReservationRequest)
    assert list(sent.systems) == ["cs2-02", "cs2-03"] and sent.maint
    assert before + 3600 <= sent.start <= time.time() + 3600
    assert sent.duration_seconds == 7200
    csctl(
        "reservation",
        "create",
        "demo",
        "--systems",
        "2",
        "--users",
        "alice,bob",
        "--end",
        "2000000000",
    )
    listed = csctl("reservation", "list")
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["NAME", "STATE", "START", "END", "NODES", "FOR", "CREATOR"]
    assert rows[1][0] == "fan-swap" and rows[1][4:] == ["cs2-02,cs2-03", "maint", "root"]
    assert rows[2][4:] == ["cs2-01,cs2-02", "alice,bob", "root"]


def test_a_bad_start_is_refused_naming_it_before_anything_is_sent(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    result = csctl("reservation", "create", "x", "--systems", "1", "--start", "someday")
    assert result.exit_code != 0 and "start" in result.output
    assert cluster.service.requests_of("CreateReservation") == []


def test_parsing_starts_and_nodes() -> None:
    assert parse_moment("now", 100.0) == 100.0
    assert parse_moment("now+1-00:00:00", 100.0) == 100.0 + 86400
    assert parse_moment("1700000000", 0.0) == 1700000000.0
    with pytest.raises(InvalidSpec):
        parse_moment("now+forever", 0.0)
    assert parse_nodes("3", "systems") == 3 and parse_nodes("a, b", "systems") == ["a", "b"]


@pytest.mark.parametrize("when", ["12h", "30d", "2 w"])
def test_a_bare_duration_is_refused_not_read_as_ago(when: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_moment(when, 1_000_000.0, "end")
    assert refused.value.field == "end" and "now+DURATION" in refused.value.message


def test_end_takes_now_plus_a_duration_and_start_now_is_the_coordinators(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    before = time.time()
    result = csctl(
        "reservation", "create", "demo", "--systems", "1", "--users", "alice",
        "--end", "now+2:00:00",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [sent] = cluster.service.requests_of("CreateReservation")
    assert isinstance(sent, cluster_pb2.CreateReservationRequest)
    assert sent.start == 0.0 and before + 7200 <= sent.end <= time.time() + 7200
