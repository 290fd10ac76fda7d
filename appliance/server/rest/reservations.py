"""Reservations (#37): admins create and delete them, anyone lists them. Thin routes over the
service shared with gRPC (services/reservations.py); every field is checked by the domain,
which names the field of a bad value."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from appliance.domain.auth import Principal
from appliance.domain.reservations import MAX_NAMES, MAX_NODES, Reservation
from appliance.domain.timestamps import utc_moment
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import Moment
from appliance.services.reservations import ReservationService

Name = Annotated[str, StringConstraints(max_length=253)]
ReservationName = Annotated[
    str, Path(description="A reservation's name (lowercase letters, digits, '-').", max_length=63)
]
Nodes = list[Name] | Annotated[int, Field(strict=True)]


class ReservationIn(BaseModel):
    """A reservation to book: its window, its nodes (names or a count of each kind: nodes free
    of other reservations then), and whom it is for (or `maint`)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(max_length=63)]
    start: float | None = Field(default=None, description="Unix seconds; null: now.")
    end: float | None = Field(default=None, description="Unix seconds; or give duration.")
    duration: float | None = Field(default=None, description="Seconds from start.")
    systems: Nodes = Field(description="CS-2 systems' names, or a count.")
    memoryx: Nodes | None = Field(default=None, description="MemoryX nodes, or a count.")
    swarmx: Nodes | None = Field(default=None, description="SwarmX nodes, or a count.")
    maint: StrictBool = Field(default=False, description="Maintenance: no job may run into it.")
    users: list[Name] = Field(default_factory=list, max_length=MAX_NAMES)
    groups: list[Name] = Field(default_factory=list, max_length=MAX_NAMES)
    queue: Annotated[str, StringConstraints(max_length=63)] = ""


class ReservationOut(BaseModel):
    name: str
    start: Moment
    end: Moment
    nodes: list[str] = Field(max_length=MAX_NODES)
    maint: bool
    users: list[str]
    groups: list[str]
    queue: str
    creator: str
    created_at: Moment
    state: str = Field(description="ACTIVE within its window, else INACTIVE.")


class ReservationListOut(BaseModel):
    reservations: list[ReservationOut]


def reservations_router(reservations: ReservationService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["reservations"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.get("/reservations", response_model=ReservationListOut)
    async def list_reservations(by: Principal | None = authenticated) -> ReservationListOut:
        """The reservations not ended, by start."""
        found, now = await reservations.list(), reservations.now()
        return ReservationListOut(reservations=[_out(r, now) for r in found])

    @router.post("/reservations", response_model=ReservationOut, status_code=201)
    async def create_reservation(
        body: ReservationIn, by: Principal | None = authenticated
    ) -> ReservationOut:
        """Admins: book nodes for a window."""
        fields: dict[str, Any] = body.model_dump()
        made = await reservations.create(fields, by=by)
        return _out(made, reservations.now())

    @router.delete("/reservations/{name}", status_code=204, response_class=Response)
    async def delete_reservation(
        name: ReservationName, by: Principal | None = authenticated
    ) -> Response:
        """Admins: delete a reservation."""
        await reservations.delete(name, by=by)
        return Response(status_code=204)

    return router


def _out(r: Reservation, now: float) -> ReservationOut:
    return ReservationOut(
        name=r.name, start=utc_moment(r.start), end=utc_moment(r.end), nodes=list(r.nodes),
        maint=r.maint, users=list(r.users), groups=list(r.groups), queue=r.queue,
        creator=r.creator, created_at=utc_moment(r.created_at), state=r.state(now),
    )  # fmt: skip
