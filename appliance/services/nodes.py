"""Admin use cases on the pool: drain a node, set it to error or maintenance, or back to ok.

Only admins may (anyone, while authentication is off). A drained node takes no new job and
keeps what runs on it. A node set to error or maintenance is taken from the jobs on it: each
is requeued from its checkpoint if its restart policy (domain/restarts.py) has a restart left,
else FAILED naming the node; for maintenance (the node itself is sound) the chief is first
asked for a checkpoint, as a preemption does. A job already leaving (preempted, reclaimed,
restarting) is requeued as it was to be; if it was waiting for a checkpoint and the node went to
error, it waits no longer. Every change is a node event, and each job it touches gets an event
saying so.
"""

from __future__ import annotations

from appliance.config import PreemptionSettings, RestartSettings
from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, NotFound, PermissionDenied
from appliance.domain.inventory import Node, NodeEvent, NodeState, NodeUsage
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode, said
from appliance.domain.restarts import restart_limit, restart_or_fail
from appliance.domain.spec import MAX_REASON, validate_text
from appliance.services.context import Context

MAX_NODE_NAME = 253
_LABELS = {"system": "system", "memoryx": "MemoryX node", "swarmx": "SwarmX node"}


def parse_node_state(value: str) -> NodeState:
    """A state an admin names; InvalidSpec naming `state` for anything else."""
    try:
        return NodeState(value)
    except ValueError:
        choices = ", ".join(s.value for s in NodeState)
        raise InvalidSpec(f"state {value[:32]!r} is not one of {choices}", field="state") from None


class NodeService:
    def __init__(
        self,
        ctx: Context,
        restarts: RestartSettings = RestartSettings(),
        preemption: PreemptionSettings = PreemptionSettings(),
    ) -> None:
        self.ctx = ctx
        self.restarts = restarts
        self.preemption = preemption

    async def set_state(
        self, name: str, state: NodeState, reason: str, by: Principal | None
    ) -> Node:
        """Set `name`'s state (with why); returns the node as it now is."""
        if by is not None and not by.admin:
            raise PermissionDenied(
                f"only admins may change the state of a node; {by.user} is not one",
                field="name",
            )
        _check_name(name)
        reason = validate_text(reason, "reason", MAX_REASON)
        who = by.user if by is not None else "anonymous"
        changed = await self.ctx.db(
            self.ctx.store.change_node_state, name, state, reason, who, self.ctx.clock()
        )
        if changed is None:
            raise NotFound(f"node {name} not found; csctl get nodes lists the pool", field="name")
        node, holders = changed
        if state.takes_jobs_away:
            for job_id, attempt in holders:
                await self._take_away(job_id, attempt, node)
        self.ctx.bus.wake_scheduler()
        self.ctx.bus.changed()
        return node

    async def status(self, name: str) -> tuple[NodeUsage, list[str]]:
        """The node as it now is: its usage, and the jobs holding part of it."""
        usage = await self.ctx.db(self.ctx.store.node_usage, name)
        if usage is None:
            raise NotFound(f"node {name} not found; csctl get nodes lists the pool", field="name")
        holders = await self.ctx.db(self.ctx.store.holders_of, [name])
        return usage, sorted({job_id for _, job_id, _ in holders})

    async def take_away_stranded(self) -> None:
        """Jobs still holding a node in error or maintenance with no requeue asked for (the
        coordinator stopped between the change and the take-away, or a take-away failed):
        take them away now. The reconciler calls this once a second."""
        usage = await self.ctx.db(self.ctx.store.pool_usage)
        out = {u.node.name: u.node for u in usage if u.node.state.takes_jobs_away and u.used}
        if not out:
            return
        seen: set[str] = set()
        for name, job_id, attempt in await self.ctx.db(self.ctx.store.holders_of, list(out)):
            if job_id not in seen:  # a job on two such nodes is taken away once
                seen.add(job_id)
                await self._take_away(job_id, attempt, out[name])

    async def _take_away(self, job_id: str, attempt: int, node: Node) -> None:
        """Requeue the job from its checkpoint if its policy allows (from one it writes now
        when the node is in maintenance, i.e. sound), else fail it naming the node."""
        state = await self.ctx.db(self.ctx.store.stop_state, job_id)
        if state is None or state.phase.terminal or state.attempt != attempt:
            return  # ended, or a later attempt
        job = await self.ctx.db(self.ctx.store.get_job, job_id, with_replicas=False)
        why = said(
            ReasonCode.NODE_ERROR, kind=_LABELS.get(node.kind.value, "node"), node=node.name,
            state=node.state.value, why=node.reason,
        )  # fmt: skip
        if state.stopping:
            # Already leaving (preempted, reclaimed, or restarting): it is requeued anyway. A
            # checkpoint it was asked for may never come from a node in error, so the requeue
            # goes ahead now, from its newest checkpoint, saying why.
            if state.checkpoint_wanted and node.state is NodeState.ERROR:
                note = (why.message, job.progress.checkpoint_step)
                given_up = await self.ctx.db(
                    self.ctx.store.give_up_checkpoint, job_id, attempt,
                    why.but(node_no_checkpoint=note),
                )  # fmt: skip
                if given_up:
                    self.ctx.bus.wake_reconciler()
            return
        limit = restart_limit(job.spec.max_restarts, self.restarts.max_restarts)
        asked = (
            node.state is NodeState.MAINTENANCE
            and job.phase is Phase.RUNNING
            and bool(job.spec.model_dir)
        )
        resume = None if asked else job.progress.checkpoint_step
        requeue, failed = restart_or_fail(why, limit, job.retries, resume, exact=False)
        if requeue is None:
            assert failed is not None
            await self.ctx.set_phase(job_id, Phase.FAILED, failed, expected=job.phase)
            return
        grace = self.preemption.grace_seconds if asked else 0.0
        await self.ctx.request_requeue(
            job_id, attempt, requeue, checkpoint_within=grace, retry=True
        )

    async def events(self, name: str) -> list[NodeEvent]:
        """The node's state changes, first first; NotFound for a node never in the pool."""
        _check_name(name)
        events = await self.ctx.read(self.ctx.store.node_events, name)
        if not events and name not in {n.name for n in await self.ctx.read(self.ctx.store.pool)}:
            raise NotFound(
                f"node {name[:64]} not found; csctl get nodes lists the pool", field="name"
            )
        return events


def _check_name(name: str) -> None:
    if not name or len(name) > MAX_NODE_NAME or not name.isprintable():
        raise InvalidSpec(f"{name[:64]!r} is not a node name", field="name")
