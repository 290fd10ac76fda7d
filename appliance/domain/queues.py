"""Queues: how admins share the pool between teams.

A queue has a nominal quota of CS-2 systems and of MemoryX bytes, a fair-share weight, a limit
on what it may borrow beyond its quota, whether it lends its idle quota to other queues, and
the groups that may submit to it. Every queue is in one cohort: the pool.

The `default` queue always exists. Its quota is whatever part of the pool no other queue's
quota holds (possibly none), so with no queues defined it owns the whole pool and the
appliance behaves as one priority queue. Nominal quotas never add up to more than the pool.
A queue that does not say how much MemoryX it gets has the share of the pool's MemoryX that
its systems are of the pool's systems (rounded down).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from appliance.domain.display import hidden_character
from appliance.domain.errors import InvalidSpec
from appliance.domain.time_limits import format_time_limit, parse_queue_time_limit

DEFAULT_QUEUE = "default"
MAX_QUEUES = 256
MAX_GROUPS = 64
MAX_WEIGHT = 1e6
MIN_WEIGHT = 1e-3
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_SYSTEMS = 1 << 20
UNLIMITED = "unlimited"
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


class Source(enum.StrEnum):
    FILE = "file"  # from APPLIANCE_QUEUES_FILE
    ADMIN = "admin"  # set at run time (csctl queue set)
    BUILTIN = "builtin"  # the default queue nobody configured
    KEPT = "kept"  # dropped from the queues file with jobs in it: no quota, gone once empty


@dataclasses.dataclass(frozen=True)
class QueueSpec:
    """One queue as an admin defined it. None for a quota: the default queue's remainder
    (systems) or the share that goes with the systems (MemoryX); None for a borrowing limit:
    no limit."""

    name: str
    systems: int | None = None
    memoryx_bytes: int | None = None
    weight: float = 1.0
    borrow_systems: int | None = None
    borrow_memoryx_bytes: int | None = None
    lend: bool = True
    groups: tuple[str, ...] = ()  # empty: anyone may submit
    # Time limits in seconds (domain/time_limits.py): a job's when it gives none, and the most
    # it may ask for; None: unlimited.
    default_time_limit: int | None = None
    max_time_limit: int | None = None
    source: Source = Source.FILE
    updated_by: str = ""
    updated_at: float = 0.0
    # Caps per user inside the queue (None: none; Slurm's MaxJobsPerUser, MaxSubmitJobs,
    # MaxTRESPerUser): admitted jobs, jobs waiting to run, CS-2 systems admitted jobs hold.
    max_running_jobs_per_user: int | None = None
    max_queued_jobs_per_user: int | None = None
    max_systems_per_user: int | None = None


# The per-user caps of a queue, as every door and the queues file name them.
USER_CAPS = ("max_running_jobs_per_user", "max_queued_jobs_per_user", "max_systems_per_user")
MAX_USER_CAP = 1_000_000


@dataclasses.dataclass(frozen=True)
class Quota:
    """A queue's nominal share of the pool, and what it may borrow (None: no limit)."""

    systems: int
    memoryx_bytes: int
    borrow_systems: int | None = None
    borrow_memoryx_bytes: int | None = None
    lend: bool = True
    weight: float = 1.0


def builtin_default() -> QueueSpec:
    return QueueSpec(DEFAULT_QUEUE, source=Source.BUILTIN)


def validate_queue(
    *,
    name: str,
    systems: Any = None,
    memoryx: Any = None,
    weight: Any = 1.0,
    borrow_systems: Any = None,
    borrow_memoryx: Any = None,
    lend: Any = True,
    groups: Any = (),
    default_time_limit: Any = None,
    max_time_limit: Any = None,
    source: Source = Source.ADMIN,
    updated_by: str = "",
    updated_at: float = 0.0,
    max_running_jobs_per_user: Any = None,
    max_queued_jobs_per_user: Any = None,
    max_systems_per_user: Any = None,
) -> QueueSpec:
    """A QueueSpec from what an admin wrote, or InvalidSpec naming the first bad field.
    `memoryx` and `borrow_memoryx` are bytes or sizes such as "32GiB"; the time limits are
    seconds or limits as Slurm writes them ("2:00:00"), None or "unlimited" for none."""
    name = validate_queue_name(name)
    if name == DEFAULT_QUEUE and systems is not None:
        raise InvalidSpec(
            "the default queue's systems are what no other queue's quota holds; set the other "
            "queues' quotas instead",
            field="systems",
        )
    if not isinstance(weight, (int, float)) or isinstance(weight, bool):
        raise InvalidSpec(f"weight must be a number, got {weight!r}", field="weight")
    if math.isnan(weight) or not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise InvalidSpec(
            f"weight must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g}, got {weight}",
            field="weight",
        )
    if not isinstance(lend, bool):
        raise InvalidSpec(f"lend must be true or false, got {lend!r}", field="lend")
    default_limit = parse_queue_time_limit(default_time_limit, "default_time_limit")
    max_limit = parse_queue_time_limit(max_time_limit, "max_time_limit")
    if default_limit is not None and max_limit is not None and default_limit > max_limit:
        raise InvalidSpec(
            f"default_time_limit {format_time_limit(default_limit)} is over max_time_limit "
            f"{format_time_limit(max_limit)}",
            field="default_time_limit",
        )
    return QueueSpec(
        name=name,
        systems=_count(systems, "systems"),
        memoryx_bytes=parse_size(memoryx, "memoryx"),
        weight=float(weight),
        borrow_systems=_count(borrow_systems, "borrow_systems"),
        borrow_memoryx_bytes=parse_size(borrow_memoryx, "borrow_memoryx"),
        lend=lend,
        groups=_groups(groups),
        default_time_limit=default_limit,
        max_time_limit=max_limit,
        source=source,
        updated_by=updated_by,
        updated_at=updated_at,
        max_running_jobs_per_user=_user_cap(
            max_running_jobs_per_user, "max_running_jobs_per_user"
        ),
        max_queued_jobs_per_user=_user_cap(max_queued_jobs_per_user, "max_queued_jobs_per_user"),
        max_systems_per_user=_user_cap(max_systems_per_user, "max_systems_per_user"),
    )


def _user_cap(value: Any, field: str) -> int | None:
    """A per-user cap of a queue: a whole number, or "unlimited" (or None) for none."""
    if value is None or value == UNLIMITED:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_USER_CAP:
        raise InvalidSpec(
            f"{field} must be a whole number from 0 to {MAX_USER_CAP}, or unlimited; got "
            f"{str(value)[:40]}",
            field=field,
        )
    return value


def validate_queue_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        shown = repr(name)[:80]
        raise InvalidSpec(
            f"queue name {shown} must be 1-63 lowercase letters, digits and '-', starting and "
            "ending with a letter or digit",
            field="queue",
        )
    return name


def parse_size(value: Any, field: str) -> int | None:
    """Bytes from an integer or a size such as "32GiB", "512Mi" or "1.5T"; None stays None."""
    if value is None or (field.startswith("borrow") and value == UNLIMITED):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) <= 32 and (match := _SIZE_RE.match(value)):
        unit = (match.group(2) or "").lower()
        unit = unit if unit == "b" else unit.removesuffix("b")  # GiB -> gi, GB -> g
        number = int(float(match.group(1)) * (_BINARY.get(unit) or _UNITS[unit]))
    else:
        raise InvalidSpec(
            f"{field} must be a number of bytes or a size such as 32GiB, got {str(value)[:40]!r}",
            field=field,
        )
    if not 0 <= number < 1 << 62:
        raise InvalidSpec(
            f"{field} must be between 0 and {1 << 62} bytes, got {str(value)[:40]}", field=field
        )
    return number


def _count(value: Any, field: str) -> int | None:
    """A count of systems; for a borrowing limit, "unlimited" (or None) is no limit."""
    if value is None or (field.startswith("borrow") and value == UNLIMITED):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SYSTEMS:
        shown = str(value)[:40]
        also = ", or unlimited" if field.startswith("borrow") else ""
        raise InvalidSpec(
            f"{field} must be a whole number from 0 to {MAX_SYSTEMS}{also}; got {shown}",
            field=field,
        )
    return value


def _groups(groups: Any) -> tuple[str, ...]:
    """Group names as tokens carry them (any printable text of up to 253 characters, without
    a comma, which separates them on csctl's command line); none: anyone may submit."""
    if groups is None:
        return ()
    if isinstance(groups, str):
        groups = [g for g in groups.split(",") if g.strip()]
    if not isinstance(groups, (list, tuple)) or len(groups) > MAX_GROUPS:
        raise InvalidSpec(f"groups must be a list of at most {MAX_GROUPS} names", field="groups")
    clean = []
    for group in groups:
        name = group.strip() if isinstance(group, str) else ""
        if not name or len(name) > 253 or "," in name or hidden_character(name) is not None:
            raise InvalidSpec(
                f"group {str(group)[:80]!r} is not a group name (printable text, no comma)",
                field="groups",
            )
        clean.append(name)
    return tuple(sorted(set(clean)))


def resolve_quotas(
    queues: Iterable[QueueSpec], pool_systems: int, pool_memoryx_bytes: int, strict: bool = True
) -> dict[str, Quota]:
    """Every queue's quota on a pool of that size (the default queue gets the rest, if any);
    `strict`: raises InvalidSpec when the queues' quotas add up to more than the pool (not
    strict: the queues keep their quotas and the default queue gets none)."""
    specs = {q.name: q for q in queues}
    if strict and len(specs) > MAX_QUEUES:
        raise InvalidSpec(
            f"at most {MAX_QUEUES} queues; there would be {len(specs)}", field="queue"
        )
    specs.setdefault(DEFAULT_QUEUE, builtin_default())
    quotas: dict[str, Quota] = {}
    for spec in specs.values():
        if spec.name == DEFAULT_QUEUE:
            continue
        systems = spec.systems or 0
        memoryx = spec.memoryx_bytes
        if memoryx is None:
            memoryx = pool_memoryx_bytes * systems // pool_systems if pool_systems else 0
        quotas[spec.name] = _quota(spec, systems, memoryx)
    taken_systems = sum(q.systems for q in quotas.values())
    taken_memoryx = sum(q.memoryx_bytes for q in quotas.values())
    if taken_systems > pool_systems and strict:
        raise InvalidSpec(
            f"the queues' quotas add up to {taken_systems} systems; the pool has {pool_systems}",
            field="systems",
        )
    if taken_memoryx > pool_memoryx_bytes and strict:
        raise InvalidSpec(
            f"the queues' quotas add up to {gib(taken_memoryx)} of MemoryX; the pool has "
            f"{gib(pool_memoryx_bytes)}",
            field="memoryx",
        )
    default = specs[DEFAULT_QUEUE]
    quotas[DEFAULT_QUEUE] = _quota(
        default, max(0, pool_systems - taken_systems), max(0, pool_memoryx_bytes - taken_memoryx)
    )
    return dict(sorted(quotas.items()))


def _quota(spec: QueueSpec, systems: int, memoryx: int) -> Quota:
    return Quota(
        systems, memoryx, spec.borrow_systems, spec.borrow_memoryx_bytes, spec.lend, spec.weight
    )


def parse_queues_document(document: Any) -> list[QueueSpec]:
    """The queues of a queues file (`queues:` a list of mappings with `name` and the fields of
    `csctl queue set`), or InvalidSpec naming the entry and field."""
    if not isinstance(document, Mapping) or set(document) != {"queues"}:
        raise InvalidSpec("the queues file must hold one key, queues: a list", field="queues")
    entries = document["queues"] or []
    if not isinstance(entries, list) or len(entries) > MAX_QUEUES:
        raise InvalidSpec(f"queues must be a list of at most {MAX_QUEUES}", field="queues")
    known = {f.name for f in dataclasses.fields(QueueSpec)} - {"source", "updated_by"}
    fields = known - {"memoryx_bytes", "borrow_memoryx_bytes", "updated_at"}
    fields |= {"memoryx", "borrow_memoryx"}
    specs: list[QueueSpec] = []
    for index, entry in enumerate(entries):
        where = f"queues[{index}]"
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise InvalidSpec(f"{where} must be a mapping with a name", field=where)
        unknown = sorted(str(k) for k in entry if k not in fields)
        if unknown:
            raise InvalidSpec(
                f"{where}: unknown field {unknown[0]!r}; known: {', '.join(sorted(fields))}",
                field=f"{where}.{unknown[0]}",
            )
        try:
            specs.append(validate_queue(**dict(entry), source=Source.FILE))
        except InvalidSpec as exc:
            raise InvalidSpec(f"{where}: {exc.message}", field=f"{where}.{exc.field}") from None
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidSpec(f"queues named twice: {', '.join(twice)}", field="queues")
    return specs


def gib(num_bytes: float) -> str:
    return f"{num_bytes / (1 << 30):.4g} GiB"


@dataclasses.dataclass(frozen=True)
class QueueStatus:
    """A queue as `csctl get queues` shows it: its definition, quota, what its jobs hold now
    (beyond the quota: borrowed), what it lends of its idle quota, its jobs, and its share of
    the cohort's recent usage (fair share; `weighted_share` orders the queues)."""

    spec: QueueSpec
    quota: Quota
    used_systems: int = 0
    used_memoryx_bytes: int = 0
    borrowed_systems: int = 0
    lent_systems: int = 0
    pending: int = 0
    running: int = 0
    share: float = 0.0  # 0..1 of the cohort's decayed usage (dominant resource)
    weighted_share: float = 0.0


def lent_systems(quotas: Mapping[str, Quota], used: Mapping[str, int]) -> dict[str, int]:
    """Which lending queue lends how many of the systems borrowed now: each lender in
    proportion to its idle quota (largest remainders get the odd ones)."""
    borrowed = sum(max(0, used.get(n, 0) - q.systems) for n, q in quotas.items())
    idle = {n: max(0, q.systems - used.get(n, 0)) for n, q in quotas.items() if q.lend}
    total = sum(idle.values())
    if not borrowed or not total:
        return {n: 0 for n in quotas}
    lending = min(borrowed, total)  # more borrowed than idle: a lender stopped lending
    exact = {n: lending * i / total for n, i in idle.items()}
    lent = {n: math.floor(x) for n, x in exact.items()}
    left = lending - sum(lent.values())
    for n in sorted(exact, key=lambda n: (lent[n] - exact[n], n))[:left]:
        lent[n] += 1
    return {n: lent.get(n, 0) for n in quotas}
