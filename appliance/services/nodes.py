"""Admin use cases on the pool: drain a node, set it to error or maintenance, or back to ok.

Only admins may (anyone, while authentication is off). A drained node takes no new job and
keeps what runs on it. A node set to error or maintenance is taken from the jobs on it: each
is requeued from its checkpoint if its restart policy (domain/restarts.py) has a restart left,
else FAILED naming the node; for maintenance (the node itself is sound) the chief is first
asked for a checkpoint, as a preemption does. Every change is a node event, and each job it
touches gets an event saying so.
"""

from __future__ import annotations

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, NotFound, PermissionDenied
from appliance.domain.inventory import Node, NodeEvent, NodeState
from appliance.domain.phases import Phase
from appliance.domain.restarts import restart_or_fail
from appliance.domain.spec import MAX_REASON, validate_text
from appliance.services.context import Context

MAX_NODE_NAME = 253
_LABELS = {"system": "system", "memoryx": "MemoryX node", "swarmx": "SwarmX node"}


def parse_node_state(value: str) -> NodeState:
    """A state an admin names; InvalidSpec naming `state` for anything else."""
    try:
        return NodeState(value.strip().lower())
    except ValueError:
        choices = ", ".join(s.value for s in NodeState)
        raise InvalidSpec(f"state {value[:32]!r} is not one of {choices}", field="state") from None


class NodeService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def set_state(
        self, name: str, state: NodeState, reason: str, by: Principal | None
    ) -> Node:
        """Set `name`'s state (with why); returns the node as it now is."""
        if by is not None and not by.admin:
            raise PermissionDenied(
                f"only admins may change the state of a node; {by.user} is not one",
                field="name",
            )
        if not name or len(name) > MAX_NODE_NAME or not name.isprintable():
            raise InvalidSpec(f"{name[:64]!r} is not a node name", field="name")
        reason = validate_text(reason, "reason", MAX_REASON)
        who = by.user if by is not None else "anonymous"
        changed = await self.ctx.db(
            self.ctx.store.change_node_state, name, state, reason, who, self.ctx.clock()
        )
        if changed is None:
            raise NotFound(f"node {name} not found; csctl get nodes lists the pool", field="name")
        node, holders = changed
        if state.takes_jobs_away:
            why = f"{_LABELS.get(node.kind.value, 'node')} {name} went to {state.value}"
            why += f": {reason}" if reason else ""
            for job_id, attempt in holders:
                await self._take_away(
                    job_id, attempt, why, checkpoint=state is NodeState.MAINTENANCE
                )
        self.ctx.bus.wake_scheduler()
        return node

    async def _take_away(self, job_id: str, attempt: int, why: str, checkpoint: bool) -> None:
        """Requeue the job from its checkpoint if its policy allows, else fail it."""
        job = await self.ctx.db(self.ctx.store.get_job, job_id, with_replicas=False)
        if job.phase.terminal or job.attempt != attempt:
            return
        limit = job.spec.max_restarts
        limit = self.ctx.settings.restart_max_restarts if limit is None else limit
        requeue, failed = restart_or_fail(why, limit, job.retries, job.progress.checkpoint_step)
        if requeue is None:
            assert failed is not None
            await self.ctx.set_phase(job_id, Phase.FAILED, failed)
            return
        grace = self.ctx.settings.preemption_grace_seconds
        asked = checkpoint and job.phase is Phase.RUNNING and bool(job.spec.model_dir)
        await self.ctx.request_requeue(
            job_id, attempt, requeue, checkpoint_within=grace if asked else 0.0, retry=True
        )

    async def events(self, name: str) -> list[NodeEvent]:
        """The node's state changes, first first; NotFound for a node never in the pool."""
        events = await self.ctx.read(self.ctx.store.node_events, name)
        if not events and name not in {n.name for n in await self.ctx.read(self.ctx.store.pool)}:
            raise NotFound(
                f"node {name[:64]} not found; csctl get nodes lists the pool", field="name"
            )
        return events
