"""The JobStore contract for reservations (#37), on every backend (`store_url`: SQLite,
PostgreSQL where one is available): a booking reads the others in its transaction and stores
nothing when refused; ended ones are deleted by the next booking; the cached read follows
every change; a delete says whether there was one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from appliance.domain.errors import Conflict
from appliance.domain.inventory import default_pool
from appliance.domain.reservations import Reservation, book, check_request
from appliance.store.jobs import JobStore

NOW = 1_000_000.0


def booking(name: str, systems: object, *, start: float, end: float, maint: bool = True):  # type: ignore[no-untyped-def]
    fields = {"name": name, "start": start, "end": end, "systems": systems, "maint": maint}
    if not maint:
        fields["users"] = ["alice"]
    request = check_request(fields, NOW)

    def make(existing: Sequence[Reservation]) -> Reservation:
        return book(request, default_pool(), existing, "root", NOW)

    return make


def test_a_booking_is_stored_read_cached_and_deleted(store: JobStore) -> None:
    made = store.book_reservation(booking("fans", 2, start=NOW + 10, end=NOW + 100), NOW)
    assert made.nodes == ("cs2-01", "cs2-02") and made.creator == "root"
    assert store.reservations() == [made]
    # The next count books what the first does not hold in that window.
    other = store.book_reservation(booking("team", 2, start=NOW, end=NOW + 50, maint=False), NOW)
    assert other.nodes == ("cs2-03", "cs2-04") and not other.maint
    assert [r.name for r in store.reservations()] == ["team", "fans"]  # by start
    assert store.delete_reservation("team") and not store.delete_reservation("team")
    assert store.reservations() == [made]


def test_a_refused_booking_stores_nothing(store: JobStore) -> None:
    store.book_reservation(booking("fans", ["cs2-01"], start=NOW + 10, end=NOW + 100), NOW)
    with pytest.raises(Conflict) as refused:
        store.book_reservation(
            booking("team", ["cs2-01"], start=NOW, end=NOW + 50, maint=False), NOW
        )
    assert refused.value.field == "start"
    with pytest.raises(Conflict):
        store.book_reservation(booking("fans", ["cs2-04"], start=NOW, end=NOW + 5), NOW)
    assert [r.name for r in store.reservations()] == ["fans"]


def test_ended_reservations_are_deleted_by_the_next_booking(store: JobStore) -> None:
    store.book_reservation(booking("old", ["cs2-01"], start=NOW, end=NOW + 10), NOW)
    later = NOW + 20
    fields = {
        "name": "old",
        "start": later,
        "end": later + 10,
        "systems": ["cs2-01"],
        "maint": True,
    }
    request = check_request(fields, later)
    again = store.book_reservation(
        lambda existing: book(request, default_pool(), existing, "root", later), later
    )
    assert store.reservations() == [again]
