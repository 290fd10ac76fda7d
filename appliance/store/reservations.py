"""Reservations in the store (domain/reservations.py says what one is): booked in one
transaction that reads the others (on PostgreSQL under a lock of the table, so two bookings
never both pass the overlap check), deleted by name, and read by every scheduler pass from a
cache kept until a change (a pass with no reservation reads nothing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from appliance.domain.reservations import Reservation
from appliance.store.base import StoreBase
from appliance.store.tables import ReservationRow


class ReservationStore(StoreBase):
    """JobStore's part for reservations."""

    _reservations: list[Reservation] | None = None
    _reservation_changes = 0

    def forget_reservations(self) -> None:
        """Read them again on next use (another coordinator may have changed them)."""
        self._reservation_changes += 1
        self._reservations = None

    def reservations(self) -> list[Reservation]:
        """Every reservation stored (those ended included until the next booking deletes
        them), by start; cached until a change."""
        found = self._reservations
        if found is None:
            changes = self._reservation_changes
            with self._sessions() as s:
                found = _all(s)
            if changes == self._reservation_changes:
                self._reservations = found
        return found

    def book_reservation(
        self, make: Callable[[Sequence[Reservation]], Reservation], now: float
    ) -> Reservation:
        """Delete the reservations ended by `now`, then store what `make` books beside the
        others (it raises, and nothing is stored, on a refusal)."""
        try:
            with self._sessions.begin() as s:
                if self.engine.dialect.name == "postgresql":
                    s.execute(text("LOCK TABLE reservations IN SHARE ROW EXCLUSIVE MODE"))
                s.execute(delete(ReservationRow).where(ReservationRow.end <= now))
                booked = make(_all(s))
                s.add(
                    ReservationRow(
                        name=booked.name, start=booked.start, end=booked.end,
                        nodes=list(booked.nodes), maint=booked.maint, users=list(booked.users),
                        groups=list(booked.groups), queue=booked.queue, creator=booked.creator,
                        created_at=booked.created_at,
                    )
                )  # fmt: skip
        finally:
            self.forget_reservations()
        return booked

    def delete_reservation(self, name: str) -> bool:
        """Delete one; False when there is none of that name."""
        try:
            with self._sessions.begin() as s:
                result = s.execute(delete(ReservationRow).where(ReservationRow.name == name))
        finally:
            self.forget_reservations()
        return bool(result.rowcount)  # type: ignore[attr-defined]


def _all(s: Session) -> list[Reservation]:
    rows = s.scalars(select(ReservationRow).order_by(ReservationRow.start, ReservationRow.name))
    return [
        Reservation(
            r.name,
            r.start,
            r.end,
            tuple(r.nodes),
            r.maint,
            tuple(r.users),
            tuple(r.groups),
            r.queue,
            r.creator,
            r.created_at,
        )
        for r in rows
    ]
