"""A CreateReservationRequest read as the domain's plain fields (protocol/reservations.py):
names or a count of each kind of node, never both silently (#37)."""

from __future__ import annotations

import pytest

from appliance._proto.v1 import cluster_pb2
from appliance.domain.errors import InvalidSpec
from appliance.protocol.reservations import request_fields, request_to_pb


def test_names_or_a_count_of_each_kind_round_trip() -> None:
    sent = {"name": "demo", "systems": ["cs2-01"], "memoryx": 2, "users": ["alice"]}
    fields = request_fields(request_to_pb(sent))
    assert fields["systems"] == ["cs2-01"] and fields["memoryx"] == 2
    assert fields["swarmx"] == 0 and fields["users"] == ["alice"]


def test_names_and_a_count_of_one_kind_are_refused_not_the_count_dropped() -> None:
    both = cluster_pb2.CreateReservationRequest(
        name="demo", systems=["cs2-01"], system_count=3, maint=True, duration_seconds=60
    )
    with pytest.raises(InvalidSpec) as refused:
        request_fields(both)
    assert refused.value.field == "systems" and "not both" in refused.value.message
