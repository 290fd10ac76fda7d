"""Queue use cases: list the queues with what they hold, define and delete them (admins), and
the queues file read at start (domain/queues.py says what a queue is; store/queue_defs.py
which of the file and a run-time change wins)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from appliance.config import SchedulerSettings
from appliance.domain.auth import Principal, check_may_submit_to
from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.errors import InvalidSpec, NotFound, PermissionDenied
from appliance.domain.fair_share import Usage, weighted_share
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.plan import ReplicaPlan
from appliance.domain.queues import (
    USER_CAPS,
    QueueSpec,
    QueueStatus,
    Quota,
    Source,
    lent_systems,
    parse_queues_document,
    resolve_quotas,
    validate_queue,
    validate_queue_name,
)
from appliance.scheduler.quotas import Need, never_fits
from appliance.services.context import Context
from appliance.store.jobs import JobStore
from appliance.store.queue_defs import FileApplied

MAX_QUEUES_FILE_BYTES = 1 << 20
SETTABLE = (
    "systems", "memoryx", "weight", "borrow_systems", "borrow_memoryx", "lend", "groups",
    *USER_CAPS,
    "default_time_limit", "max_time_limit",
)  # fmt: skip


def find_queue(specs: Sequence[QueueSpec], name: str) -> QueueSpec:
    """The queue `name` of `specs` if it takes new jobs (a submit's, a reservation's), else
    InvalidSpec naming `queue`: one that does not exist, or was dropped from the queues file."""
    spec = next((q for q in specs if q.name == name), None)
    if spec is None:
        known = ", ".join(q.name for q in specs)
        raise InvalidSpec(f"queue {name} does not exist; the queues are {known}", field="queue")
    if spec.source is Source.KEPT:
        raise InvalidSpec(
            f"queue {name} was dropped from the queues file and takes no new jobs",
            field="queue",
        )
    return spec


def pool_size(pool: list[Node]) -> tuple[int, int]:
    """(systems, MemoryX bytes) of the pool: what quotas are shares of."""
    systems = sum(1 for n in pool if n.kind is NodeKind.SYSTEM)
    memoryx = sum(n.capacity for n in pool if n.kind is NodeKind.MEMORYX)
    return systems, memoryx


def apply_queues_file(store: JobStore, path: Path, pool: list[Node]) -> FileApplied:
    """Read the queues file and apply it if it changed since it was last applied; raises
    InvalidSpec saying what to fix (the coordinator then does not start)."""
    specs, raw = read_queues_file(path)
    systems, memoryx = pool_size(pool)
    digest = hashlib.sha256(raw).hexdigest()

    def check(queues: list[QueueSpec]) -> None:
        try:
            resolve_quotas(queues, systems, memoryx)
        except InvalidSpec as exc:
            raise InvalidSpec(f"queues file {path}: {exc.message}", field=exc.field) from None

    return store.apply_queues_file(specs, digest, check)


def read_queues_file(path: Path) -> tuple[list[QueueSpec], bytes]:
    """The queues of the queues file `path`, and its bytes; InvalidSpec saying what to fix."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_QUEUES_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidSpec(f"cannot read the queues file {path}: {exc.strerror}") from None
    if len(raw) > MAX_QUEUES_FILE_BYTES:
        raise InvalidSpec(f"the queues file {path} is over {MAX_QUEUES_FILE_BYTES} bytes")
    try:
        specs = parse_queues_document(load_bounded(raw.decode("utf-8"), "queues"))
    except UnicodeDecodeError:
        raise InvalidSpec(f"the queues file {path} is not UTF-8 text") from None
    except InvalidSpec as exc:
        raise InvalidSpec(f"queues file {path}: {exc.message}", field=exc.field) from None
    return specs, raw


class QueueService:
    def __init__(self, ctx: Context, scheduler: SchedulerSettings = SchedulerSettings()) -> None:
        self.ctx = ctx
        self.half_life = scheduler.fair_share_half_life_seconds
        # The quotas resolved on the store's kept definitions and pool: (those two, quotas).
        self._resolved: tuple[object, object, Mapping[str, Quota]] | None = None

    async def list(self) -> list[QueueStatus]:
        store = self.ctx.store
        specs = await self.ctx.read(store.queue_specs)
        if any(q.source is Source.KEPT for q in specs):  # gone once their last job ended
            await self.ctx.db(store.sweep_kept_queues)
            specs = await self.ctx.read(store.queue_specs)
        pool = await self.ctx.db(store.pool)
        systems, memoryx = pool_size(pool)
        quotas = resolve_quotas(specs, systems, memoryx, strict=False)
        loads = await self.ctx.read(store.queue_loads)
        now, half_life = self.ctx.clock(), self.half_life
        await self.ctx.db(store.fold_usage, now, half_life)  # jobs that ended since the pass
        usage = await self.ctx.read(store.queue_usage, now, half_life)
        used = {name: loads[name].systems for name in loads}
        lent = lent_systems(quotas, used)
        # Of all the cluster's decayed usage, deleted queues' included.
        dominant = {
            name: weighted_share(usage.get(name, Usage()), systems, memoryx, 1.0)
            for name in {*quotas, *usage}
        }
        total = sum(dominant.values())
        statuses = []
        for spec in specs:
            quota, load = quotas[spec.name], loads.get(spec.name)
            held = (load.systems, load.memoryx_bytes) if load else (0, 0)
            statuses.append(
                QueueStatus(
                    spec=spec,
                    quota=quota,
                    used_systems=held[0],
                    used_memoryx_bytes=held[1],
                    borrowed_systems=max(0, held[0] - quota.systems),
                    lent_systems=lent.get(spec.name, 0),
                    pending=load.pending if load else 0,
                    running=load.running if load else 0,
                    share=dominant[spec.name] / total if total else 0.0,
                    weighted_share=dominant[spec.name] / quota.weight,
                )
            )
        return statuses

    async def status(self, name: str) -> QueueStatus:
        found = [q for q in await self.list() if q.spec.name == name]
        if not found:
            raise NotFound(f"queue {name} not found; csctl get queues lists them", field="queue")
        return found[0]

    async def set(self, name: str, fields: dict[str, Any], by: Principal | None) -> QueueSpec:
        """Create the queue, or change the given fields of it (the others are kept). A
        borrowing limit of "unlimited" (or None) removes the limit."""
        _check_admin(by, "define queues")
        name = validate_queue_name(name)
        unknown = sorted(set(fields) - set(SETTABLE))
        if unknown:
            raise InvalidSpec(f"unknown queue field {unknown[0]!r}", field=unknown[0])
        who = by.user if by is not None else "anonymous"
        now = self.ctx.clock()

        def build(current: QueueSpec | None) -> QueueSpec:
            merged: dict[str, Any] = {}
            if current is not None and current.source is not Source.KEPT:
                merged = {
                    "systems": current.systems, "memoryx": current.memoryx_bytes,
                    "weight": current.weight, "borrow_systems": current.borrow_systems,
                    "borrow_memoryx": current.borrow_memoryx_bytes, "lend": current.lend,
                    "groups": current.groups,
                    **{cap: getattr(current, cap) for cap in USER_CAPS},
                    "default_time_limit": current.default_time_limit,
                    "max_time_limit": current.max_time_limit,
                }  # fmt: skip
            merged.update(fields)
            return validate_queue(
                name=name, **merged, source=Source.ADMIN, updated_by=who, updated_at=now
            )

        store = self.ctx.store
        systems, memoryx = pool_size(await self.ctx.db(store.pool))
        spec = await self.ctx.db(
            store.put_queue, name, build, lambda queues: resolve_quotas(queues, systems, memoryx)
        )
        self.ctx.bus.wake_scheduler()
        return spec

    async def delete(self, name: str, by: Principal | None) -> None:
        _check_admin(by, "delete queues")
        await self.ctx.db(self.ctx.store.delete_queue, validate_queue_name(name))
        self.ctx.bus.wake_scheduler()

    async def check_submit(self, name: str, by: Principal | None) -> QueueSpec:
        """The queue a job is submitted to, if it exists and `by` may submit to it. Decided
        on the store's kept copy of the definitions when it has one (no trip to a reader
        thread per submit); a refusal is decided on a fresh read."""
        store = self.ctx.store
        kept = store.cached_queue_specs()
        spec = kept.get(name) if kept is not None else None
        if spec is None or spec.source is Source.KEPT:
            spec = find_queue(await self.ctx.read(store.queue_specs), name)
        check_may_submit_to(by, spec)
        return spec

    async def check_can_run(self, queue: QueueSpec, plan: ReplicaPlan) -> None:
        """InvalidSpec unless the queue's limits (quota and borrowing limit) let a job of
        `plan` ever run in it (a queue without a borrowing limit always may)."""
        if queue.borrow_systems is None and queue.borrow_memoryx_bytes is None:
            return
        quota = (await self._quotas()).get(queue.name)
        most = plan.sizes()[0]  # an elastic job's largest size must fit too
        why = never_fits(queue.name, quota, Need.of(most)) if quota is not None else ""
        if why:
            raise InvalidSpec(f"the job can never run: {why}", field="num_csx")

    async def _quotas(self) -> Mapping[str, Quota]:
        """Every queue's quota on the pool. Resolved once per kept copy of the definitions
        and of the pool when the store has both (both are dropped by any change): with 30
        queues and a 1,050-node pool, reading and resolving them cost every submit to a queue
        with a borrowing limit ~1 ms (#38's Kueue baseline); else read and resolved."""
        store = self.ctx.store
        kept, pool = store.cached_queue_specs(), store.cached_pool()
        resolved = self._resolved
        if resolved is not None and resolved[0] is kept and resolved[1] is pool:
            return resolved[2]
        if kept is not None and pool is not None:
            specs = list(kept.values())
        else:
            specs = await self.ctx.read(store.queue_specs)
            pool = pool if pool is not None else await self.ctx.db(store.pool)
        systems, memoryx = pool_size(pool)
        quotas = resolve_quotas(specs, systems, memoryx, strict=False)
        if kept is not None and pool is store.cached_pool():
            self._resolved = (kept, pool, quotas)
        return quotas


def _check_admin(by: Principal | None, what: str) -> None:
    if by is not None and not by.admin:
        raise PermissionDenied(f"only admins may {what}; {by.user} is not one", field="queue")
