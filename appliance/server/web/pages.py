"""The dashboard's pages: thin routes that call the use cases REST calls and render them."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from appliance.domain.auth import Principal
from appliance.domain.inventory import NodeKind, NodeUsage
from appliance.domain.job import Job, ReplicaPhase
from appliance.domain.listing import DEFAULT_LIMIT, JobQuery
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason
from appliance.domain.selectors import LabelSelector, parse_selector
from appliance.domain.spec import Priority
from appliance.domain.usage import UsageBy
from appliance.server.web.fields import one_of
from appliance.server.web.render import PREFIX, HtmlRoute, age, page, rfc3339
from appliance.server.web.session import Sessions
from appliance.server.web.summaries import (
    KIND_NAMES,
    amount,
    curves_response,
    kind_totals,
    waiting_for,
)
from appliance.services.use_cases import UseCases

JobId = Annotated[str, Path(max_length=64)]
MAX_SHOWN = 2_000  # rows a list page shows at most (the API pages beyond)
SETTLE_SECONDS = 120.0  # after a job's end, how long its page waits for its replicas to end
UNSETTLED = frozenset({ReplicaPhase.PENDING, ReplicaPhase.STARTED, ReplicaPhase.READY})


def pages_router(uses: UseCases, sessions: Sessions) -> APIRouter:
    jobs, usage, queue_use = uses.jobs, uses.usage, uses.queues
    router = APIRouter(route_class=HtmlRoute, include_in_schema=False)
    caller = Depends(sessions.caller)
    listing = jobs.listing(lambda job: job, max_cached=MAX_SHOWN)

    async def listed(query: JobQuery) -> list[Job]:
        found, _ = await listing.page(query)
        return [_waiting(job, pos, reason, start) for job, pos, reason, start in found]

    @router.get("/", response_class=HTMLResponse)
    @router.get(f"{PREFIX}/queue", response_class=HTMLResponse)
    async def queue_page(request: Request, by: Principal | None = caller) -> HTMLResponse:
        """Queued jobs in the order they will run, each queue on its own."""
        queued = await listed(JobQuery(phases=frozenset({Phase.QUEUED}), limit=MAX_SHOWN))
        queued.sort(key=lambda job: (job.spec.queue, job.queue_position or MAX_SHOWN))
        rows = [_row(job) for job in queued]
        return page(request, "queue.html", {"rows": rows, "title": "Queue"})

    @router.get(f"{PREFIX}/jobs", response_class=HTMLResponse)
    async def jobs_page(
        request: Request,
        all: bool = False,
        mine: bool = False,
        user: Annotated[str, Query(max_length=253)] = "",
        label: Annotated[str, Query(max_length=1024)] = "",
        phase: Annotated[str, Query(max_length=20)] = "",
        by: Principal | None = caller,
    ) -> HTMLResponse:
        """Jobs as `csctl get jobs` lists them: all (with finished), mine, labels, phase."""
        if mine and by is not None:
            user = by.user
        wanted = Phase(one_of(phase, list(Phase), "phase")) if phase else None
        query = JobQuery(
            include_terminal=all, user=user, limit=DEFAULT_LIMIT,
            selector=parse_selector(label, "label") if label else LabelSelector(),
            phases=frozenset({wanted}) if wanted else frozenset(),
        )  # fmt: skip
        rows = [_row(job) for job in await listed(query)]
        filters = {"all": all, "mine": mine, "user": user, "label": label, "phase": wanted}
        return page(request, "jobs.html", {"rows": rows, "filters": filters, "phases": list(Phase),
                                           "title": "Jobs"})  # fmt: skip

    @router.get(f"{PREFIX}/jobs/{{job_id}}", response_class=HTMLResponse)
    async def job_page(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> HTMLResponse:
        """One job: spec, phase, attempts, replicas, events, log tail and curves."""
        job = await jobs.get(job_id, by=by)
        priorities = [p.name for p in Priority]
        context = {"job": job, "row": _row(job), "priorities": priorities, "title": job.id,
                   "settling": _settling(job, time.time())}  # fmt: skip
        return page(request, "job.html", context)

    @router.get(f"{PREFIX}/jobs/{{job_id}}/curves")
    async def job_curves(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> Response:
        """The job's curves from its first step (JSON, for the job page's charts)."""
        return curves_response(await jobs.curves(job_id))

    @router.get(f"{PREFIX}/cluster", response_class=HTMLResponse)
    async def cluster_page(request: Request, by: Principal | None = caller) -> HTMLResponse:
        """The pool as tiles: every CS-2, MemoryX, SwarmX and input-worker node, coloured by
        state; totals by kind, and the queued jobs by what they wait for."""
        nodes = await jobs.nodes()
        groups = [
            (kind, KIND_NAMES[kind], [_tile(u, held) for u, held in nodes if u.node.kind is kind])
            for kind in NodeKind
        ]
        queued = await listed(JobQuery(phases=frozenset({Phase.QUEUED}), limit=MAX_SHOWN))
        now = uses.reservations.now()
        reservations = [
            {"name": r.name, "state": r.state(now), "start": rfc3339(r.start),
             "end": rfc3339(r.end), "nodes": ", ".join(r.nodes), "audience": r.audience}
            for r in await uses.reservations.list()
        ]  # fmt: skip
        context = {
            "groups": groups, "totals": kind_totals([u for u, _ in nodes]),
            "waiting": waiting_for(queued, MAX_SHOWN), "title": "Cluster",
            "reservations": reservations,
        }  # fmt: skip
        return page(request, "cluster.html", context)

    @router.get(f"{PREFIX}/queues", response_class=HTMLResponse)
    async def queues_page(
        request: Request,
        group_by: Annotated[UsageBy, Query(alias="by")] = UsageBy.USER,
        since: Annotated[str, Query(max_length=40)] = "",
        by: Principal | None = caller,
    ) -> HTMLResponse:
        """Queues (quota, use, fair share) and usage accounting over a window."""
        queues = await queue_use.list()
        window, rows = await usage.report(since, "", group_by.value)
        context = {
            "queues": queues, "usage": rows, "usage_by": group_by.value, "since": since,
            "bys": [b.value for b in UsageBy], "window": window, "title": "Queues and usage",
        }  # fmt: skip
        return page(request, "queues.html", context)

    return router


def _waiting(job: Job, position: int, reason: Reason | None, estimated_start: float) -> Job:
    """A listed queued job with its fresh position, reason and estimated start (as the REST
    list shows it)."""
    if not position:
        return job
    return dataclasses.replace(
        job,
        queue_position=position,
        pending_reason=reason.message if reason is not None else job.pending_reason,
        pending_reason_code=reason.code_text if reason is not None else job.pending_reason_code,
        estimated_start=estimated_start,
    )


def _row(job: Job) -> dict[str, Any]:
    now = time.time()
    return {
        "id": job.id, "user": job.user, "phase": job.phase.value,
        "priority": job.spec.priority.name, "queue": job.spec.queue,
        "position": job.queue_position or "",
        "reason": job.pending_reason if job.phase is Phase.QUEUED else job.reason,
        "age": age(job.created_at, now), "systems": ", ".join(job.systems),
        "labels": ", ".join(f"{k}={v}" for k, v in sorted(job.spec.labels.items())),
        "step": f"{job.progress.step}/{job.spec.num_steps}" if job.progress.step else "",
    }  # fmt: skip


def _settling(job: Job, now: float) -> bool:
    """The job ended a moment ago and some of its replicas have not: their exits are written
    as the teardown stops them, after the job's last phase event, so the page's live part
    fetches itself again until they have (for SETTLE_SECONDS at most)."""
    return (
        job.phase.terminal
        and now - job.finished_at < SETTLE_SECONDS
        and any(r.phase in UNSETTLED for r in job.replicas)
    )


def _tile(usage: NodeUsage, holders: list[str]) -> dict[str, Any]:
    node = usage.node
    state = node.state.value
    look = "busy" if state == "ok" and usage.used else ("idle" if state == "ok" else state)
    return {
        "name": node.name, "state": state, "look": look, "reason": node.reason,
        "jobs": holders, "used": usage.used, "capacity": node.capacity,
        "in_use": f"{amount(node.kind, usage.used)} of {amount(node.kind, node.capacity)}",
    }  # fmt: skip
