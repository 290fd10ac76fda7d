"""The pool: list nodes by kind, an admin's change of a node's state, its events. Thin routes
over the services shared with gRPC."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from appliance.domain.auth import Principal
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.spec import MAX_REASON
from appliance.domain.timestamps import utc_moment
from appliance.server.rest.audit import name_verb
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import Moment
from appliance.services.jobs import JobService
from appliance.services.nodes import MAX_NODE_NAME, NodeService

NodeName = Annotated[
    str, Path(description="cs2-01, memx-01, swarmx-01, ...", max_length=MAX_NODE_NAME)
]


class NodeOut(BaseModel):
    name: str
    kind: NodeKind
    state: str = Field(description="ok, error, maintenance or drain")
    capacity: int = Field(description="1 for a system, bytes for MemoryX, ports for SwarmX.")
    used: int
    jobs: list[str] = Field(description="Jobs holding part of the node.")
    reason: str = Field(description="Why an admin set the state.")
    since: Moment = Field(description="When the state was set; null: never changed.")


class NodeListOut(BaseModel):
    nodes: list[NodeOut]


class NodeGroupOut(BaseModel):
    kind: NodeKind
    nodes: int
    usable: int = Field(description="Nodes in state ok.")
    capacity: int
    used: int


class NodeGroupListOut(BaseModel):
    nodegroups: list[NodeGroupOut]


class NodeStateIn(BaseModel):
    """The state to set, and why (shown with the node and in its events)."""

    model_config = ConfigDict(extra="forbid")

    state: NodeState = Field(
        description="drain: no new job lands, what runs finishes; error or maintenance: the "
        "jobs on it are requeued from their checkpoint or failed, by their restart policy; ok."
    )
    reason: str = Field(default="", max_length=MAX_REASON, description="Why.")


class NodeEventOut(BaseModel):
    node: str
    time: Moment
    state: NodeState
    reason: str
    by: str = Field(description="Who changed it.")


class NodeEventListOut(BaseModel):
    events: list[NodeEventOut]


def nodes_router(jobs: JobService, states: NodeService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["cluster"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.get("/nodes", response_model=NodeListOut, tags=["cluster"])
    async def list_nodes(by: Principal | None = authenticated) -> NodeListOut:
        """Every CS-2 system, MemoryX, SwarmX and input-worker node: state, usage and the jobs
        holding it."""
        return NodeListOut(nodes=[_node_out(u, j) for u, j in await jobs.nodes()])

    @router.get("/systems", response_model=NodeListOut, tags=["cluster"])
    async def list_systems(by: Principal | None = authenticated) -> NodeListOut:
        """The CS-2 systems only."""
        nodes = await jobs.nodes()
        systems = [(u, j) for u, j in nodes if u.node.kind is NodeKind.SYSTEM]
        return NodeListOut(nodes=[_node_out(u, j) for u, j in systems])

    @router.get("/nodegroups", response_model=NodeGroupListOut, tags=["cluster"])
    async def list_nodegroups(by: Principal | None = authenticated) -> NodeGroupListOut:
        """The pool by kind: how many nodes, how many usable, capacity and usage."""
        groups = []
        nodes = await jobs.nodes()
        for kind in NodeKind:
            members = [u for u, _ in nodes if u.node.kind is kind]
            groups.append(
                NodeGroupOut(
                    kind=kind,
                    nodes=len(members),
                    usable=sum(1 for u in members if u.node.state.value == "ok"),
                    capacity=sum(u.node.capacity for u in members),
                    used=sum(u.used for u in members),
                )
            )
        return NodeGroupListOut(nodegroups=groups)

    @router.put("/nodes/{name}/state", response_model=NodeOut)
    async def set_node_state(
        request: Request, name: NodeName, body: NodeStateIn, by: Principal | None = authenticated
    ) -> NodeOut:
        """Admins: drain a node, set it to error or maintenance, or back to ok."""
        name_verb(request, f"node-{body.state.value}")
        node = await states.set_state(name, body.state, body.reason, by=by)
        return _node_out(*await states.status(node.name))

    @router.get("/nodes/{name}/events", response_model=NodeEventListOut)
    async def node_events(
        name: NodeName, by: Principal | None = authenticated
    ) -> NodeEventListOut:
        """The node's state changes, first first."""
        events = await states.events(name)
        return NodeEventListOut(
            events=[
                NodeEventOut(
                    node=e.node, time=utc_moment(e.time), state=e.state, reason=e.reason, by=e.by
                )
                for e in events
            ]
        )

    return router


def _node_out(usage: NodeUsage, holders: list[str]) -> NodeOut:
    node = usage.node
    return NodeOut(
        name=node.name, kind=node.kind, state=node.state.value, capacity=node.capacity,
        used=usage.used, jobs=holders, reason=node.reason, since=utc_moment(node.since),
    )  # fmt: skip
