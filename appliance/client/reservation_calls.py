"""The client's calls on reservations (#37): create, list, delete. A part of ApplianceClient
(appliance/client/client.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.reservations import Reservation
from appliance.protocol.reservations import request_to_pb, reservation_from_pb

_T = TypeVar("_T")
Nodes = Sequence[str] | int | None


class ReservationCalls:
    """Reservations; ApplianceClient provides `_stub` and `_call`."""

    _stub: cluster_pb2_grpc.ClusterServiceStub

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        raise NotImplementedError

    def create_reservation(
        self,
        name: str,
        *,
        systems: Nodes,
        start: float = 0.0,
        end: float = 0.0,
        duration: float = 0.0,
        memoryx: Nodes = None,
        swarmx: Nodes = None,
        maint: bool = False,
        users: Sequence[str] = (),
        groups: Sequence[str] = (),
        queue: str = "",
    ) -> Reservation:
        """Admins: book nodes (names, or a count of each kind) for [start, end) (Unix
        seconds; start 0: now; or `duration` seconds), for maintenance or for the jobs of
        `users`, `groups` or `queue` (Slurm's scontrol create reservation)."""
        request = request_to_pb(
            {
                "name": name, "start": start, "end": end, "duration": duration,
                "systems": list(systems) if not isinstance(systems, int) and systems else systems,
                "memoryx": memoryx if isinstance(memoryx, int) else list(memoryx or ()),
                "swarmx": swarmx if isinstance(swarmx, int) else list(swarmx or ()),
                "maint": maint, "users": list(users), "groups": list(groups), "queue": queue,
            }
        )  # fmt: skip
        return reservation_from_pb(self._call(self._stub.CreateReservation, request))

    def reservations(self) -> list[Reservation]:
        """The reservations not ended, by start."""
        response = self._call(self._stub.ListReservations, cluster_pb2.ListReservationsRequest())
        return [reservation_from_pb(r) for r in response.reservations]

    def delete_reservation(self, name: str) -> None:
        """Admins: delete a reservation."""
        self._call(self._stub.DeleteReservation, cluster_pb2.DeleteReservationRequest(name=name))
