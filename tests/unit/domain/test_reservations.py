"""Reservations' checks (domain/reservations.py): every bad field refused with one sentence
naming it, counts turned into free nodes' names, overlaps with maintenance refused."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.domain.errors import Conflict, InsufficientCapacity, InvalidSpec
from appliance.domain.inventory import default_pool
from appliance.domain.reservations import (
    MAX_WINDOW_SECONDS,
    Reservation,
    book,
    check_request,
    holding,
)

NOW = 1_000_000.0
POOL = default_pool()  # cs2-01..04, memx-01..04, swarmx-01..02


def request(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "maint-1", "start": NOW + 100, "end": NOW + 200, "systems": 2, "maint": True,
    }  # fmt: skip
    base.update(fields)
    return base


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"start": NOW - 500, "end": NOW - 100}, "end"),
        ({"start": NOW + 300, "end": NOW + 200}, "start"),
        ({"start": NOW - 3600}, "start"),  # a window begun long ago: not booked from then
        ({"end": NOW + 2 * MAX_WINDOW_SECONDS}, "end"),
        ({"end": None}, "end"),
        ({"end": NOW + 200, "duration": 60}, "duration"),
        ({"start": "tomorrow"}, "start"),
        ({"start": float("nan")}, "start"),
        ({"systems": -1}, "systems"),
        ({"systems": ["cs2-01", 7]}, "systems"),
        ({"systems": 0}, "systems"),
        ({"memoryx": ["x" * 300]}, "memoryx"),
        ({"maint": "yes"}, "maint"),
        ({"users": ["alice"]}, "users"),  # maintenance is for nobody
        ({"queue": "research"}, "queue"),
        ({"maint": False}, "users"),  # for somebody, then
        ({"maint": False, "users": ["a b"]}, "users"),
        ({"maint": False, "groups": ["g"] * 65}, "groups"),
        ({"maint": False, "queue": "No Such"}, "queue"),
    ],
)
def test_a_bad_field_is_refused_naming_it(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        check_request(request(**fields), NOW)
    assert refused.value.field == field
    assert "\n" not in refused.value.message


def test_a_duration_or_no_start_makes_the_window_from_now() -> None:
    checked = check_request(request(start=None, end=None, duration=3600), NOW)
    assert (checked.start, checked.end) == (NOW, NOW + 3600)


def test_a_start_a_little_in_the_past_is_taken_as_now() -> None:
    checked = check_request(request(start=NOW - 30, end=None, duration=60), NOW)
    assert (checked.start, checked.end) == (NOW, NOW + 60)


def test_a_count_becomes_the_names_of_nodes_free_of_other_reservations() -> None:
    taken = Reservation("team", NOW, NOW + 1000, ("cs2-01",), users=("alice",))
    made = book(
        check_request(request(maint=False, users=["bob"]), NOW), POOL, [taken], "root", NOW
    )
    assert made.nodes == ("cs2-02", "cs2-03")
    assert made.creator == "root" and made.created_at == NOW
    with_memoryx = book(
        check_request(request(memoryx=2, swarmx=["swarmx-02"]), NOW), POOL, [], "r", NOW
    )
    assert with_memoryx.nodes == ("cs2-01", "cs2-02", "memx-01", "memx-02", "swarmx-02")


def test_a_count_takes_nodes_whose_running_job_ends_before_the_window_first() -> None:
    running = {"cs2-01": float("inf"), "cs2-02": NOW + 150, "cs2-03": NOW + 50}
    made = book(check_request(request(systems=2), NOW), POOL, [], "root", NOW, running)
    assert made.nodes == ("cs2-03", "cs2-04")  # cs2-01's job has no limit, cs2-02's ends late
    team = request(systems=3, maint=False, users=["alice"])
    made = book(check_request(team, NOW), POOL, [], "root", NOW, running)
    assert made.nodes == ("cs2-03", "cs2-04", "cs2-01")  # then in name order
    with pytest.raises(InsufficientCapacity):  # maintenance never takes a node busy in it
        book(check_request(request(systems=3), NOW), POOL, [], "root", NOW, running)


def test_maintenance_on_a_node_whose_job_would_run_into_it_is_refused() -> None:
    running = {"cs2-01": float("inf"), "cs2-03": NOW + 50}
    with pytest.raises(Conflict) as refused:
        book(check_request(request(systems=["cs2-01"]), NOW), POOL, [], "root", NOW, running)
    assert refused.value.field == "systems" and "cs2-01 runs a job" in refused.value.message
    made = book(check_request(request(systems=["cs2-03"]), NOW), POOL, [], "root", NOW, running)
    assert made.nodes == ("cs2-03",)  # its job ends before the window


def test_refusals_of_booking() -> None:
    maint = Reservation("m", NOW + 150, NOW + 300, ("cs2-03",), maint=True)
    user = Reservation("u", NOW, NOW + 500, ("cs2-01",), users=("alice",))
    ended = Reservation("maint-1", NOW - 100, NOW - 1, ("cs2-01", "cs2-02"), maint=True)
    cases: list[tuple[dict[str, Any], list[Reservation], type[Exception], str]] = [
        ({"systems": ["cs2-99"]}, [], InvalidSpec, "systems"),
        ({"systems": ["memx-01"]}, [], InvalidSpec, "systems"),
        ({"systems": 5}, [], InsufficientCapacity, "systems"),
        ({"systems": ["cs2-03"], "maint": False, "users": ["bob"]}, [maint], Conflict, "start"),
        ({"systems": ["cs2-01"]}, [user], Conflict, "start"),  # maintenance over a reservation
        ({}, [Reservation("maint-1", NOW, NOW + 9, ("cs2-04",), users=("x",))], Conflict, "name"),
    ]
    for fields, existing, error, field in cases:
        with pytest.raises(error) as refused:
            book(check_request(request(**fields), NOW), POOL, existing, "root", NOW)
        assert refused.value.field == field, fields  # type: ignore[attr-defined]
    # An ended reservation blocks nothing, and its name may be used again.
    assert book(check_request(request(systems=["cs2-01"]), NOW), POOL, [ended], "r", NOW)


def test_who_a_reservation_admits_and_what_a_node_shows() -> None:
    user = Reservation(
        "u", NOW, NOW + 500, ("cs2-01",), users=("alice",), groups=("ml",), queue="q"
    )
    assert user.admits("alice", (), "default") and user.admits("bob", ("ml",), "default")
    assert user.admits("bob", (), "q") and not user.admits("bob", ("ops",), "default")
    maint = Reservation("m", NOW + 600, NOW + 700, ("cs2-01", "cs2-02"), maint=True)
    assert not maint.admits("alice", ("ml",), "q")
    shown = holding([maint, user], NOW)
    assert shown["cs2-01"].name == "u" and shown["cs2-02"].name == "m"
    assert user.state(NOW) == "ACTIVE" and maint.state(NOW) == "INACTIVE"
