"""PATCH a job (priority, labels), heartbeat its lease, and the pool: thin routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from appliance.domain.auth import Principal
from appliance.domain.inventory import NodeKind, NodeUsage
from appliance.domain.spec import Priority, validate_labels
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import JobOut, LeaseOut, PriorityName, job_out, lease_out
from appliance.services.jobs import JobService

JobId = Annotated[str, Path(description="The job's name, wsjob-<id>.", max_length=64)]


class LabelsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    set: dict[str, str] = Field(default_factory=dict, description="Labels to add or change.")
    remove: list[str] = Field(default_factory=list, description="Label keys to remove.")


class JobPatchIn(BaseModel):
    """What to change; fields left out stay as they are."""

    model_config = ConfigDict(extra="forbid")

    priority: PriorityName | None = Field(default=None, description="New queue priority.")
    labels: LabelsPatch | None = None


class HeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holder: str = Field(default="", max_length=300, description="Where the client runs.")


class HeartbeatOut(BaseModel):
    lease: LeaseOut | None
    keep_running: bool = Field(description="False once the job is terminal.")


class NodeOut(BaseModel):
    name: str
    kind: NodeKind
    state: str = Field(description="ok, error or maintenance")
    capacity: int = Field(description="1 for a system, bytes for MemoryX, ports for SwarmX.")
    used: int
    jobs: list[str] = Field(description="Jobs holding part of the node.")


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


def controls_router(jobs: JobService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.patch("/jobs/{job_id}", response_model=JobOut)
    async def patch_job(
        job_id: JobId, body: JobPatchIn, by: Principal | None = authenticated
    ) -> JobOut:
        """Change a job's priority (queued or running jobs; P0 is admin-only) and/or labels."""
        job = None
        if body.labels is not None:
            validate_labels(body.labels.set)  # before any write: all of the PATCH or none of it
        if body.priority is not None:
            job = await jobs.set_priority(job_id, Priority[body.priority.name], by=by)
        if body.labels is not None:
            job = await jobs.update_labels(job_id, body.labels.set, body.labels.remove, by=by)
        return job_out(job or await jobs.get(job_id, by=by))

    @router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatOut)
    async def heartbeat(
        job_id: JobId, body: HeartbeatIn, by: Principal | None = authenticated
    ) -> HeartbeatOut:
        """The submitting client is still there: extend the job's lease."""
        job = await jobs.renew_lease(job_id, body.holder, by=by)
        lease = lease_out(job.lease) if job.lease else None
        return HeartbeatOut(lease=lease, keep_running=not job.phase.terminal)

    @router.get("/nodes", response_model=NodeListOut, tags=["cluster"])
    async def list_nodes(by: Principal | None = authenticated) -> NodeListOut:
        """Every CS-2 system, MemoryX and SwarmX node: state, usage and the jobs holding it."""
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

    return router


def _node_out(usage: NodeUsage, holders: list[str]) -> NodeOut:
    node = usage.node
    return NodeOut(
        name=node.name, kind=node.kind, state=node.state.value, capacity=node.capacity,
        used=usage.used, jobs=holders,
    )  # fmt: skip
