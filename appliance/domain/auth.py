"""Who is calling, and what they may do to a job.

Authentication is off by default (the embedded default stays one command): every caller is then
an admin acting as the user it names. With tokens configured, a caller is the user its token
maps to; a user may cancel, relabel or re-prioritise only jobs of their own groups (or their
own jobs); admins may act on any job; P0 is admin-only. The same people see a job's details
(its params, its replicas' addresses, pids and log tails, its logs); everyone else sees what
the list view shows, as the real csctl gives everyone.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Sequence
from typing import NamedTuple

from appliance.domain.errors import PermissionDenied
from appliance.domain.phases import Phase
from appliance.domain.queues import QueueSpec
from appliance.domain.spec import JobSpec, Priority

# Who a request is from while authentication is off and it names no user.
ANONYMOUS_USER = "anonymous"
# The gRPC metadata key of a caller's bearer token: users' tokens, and replicas' per-job tokens.
AUTH_METADATA_KEY = "authorization"
# Who a caller says it is while authentication is off (gRPC metadata; REST's header is
# X-Appliance-User): per-user limits count its calls as that user's (services/limits.py).
CLAIMED_USER_METADATA_KEY = "appliance-user"
CLAIMED_USER_HEADER = "x-appliance-user"
# The environment variable that carries a job's replica token into each of its replicas.
REPLICA_TOKEN_ENV = "APPLIANCE_REPLICA_TOKEN"
# The environment variable that carries a job's data-plane token: every call between the
# replicas of one job carries it, and a call without it is refused (authentication on or off).
DATAPLANE_TOKEN_ENV = "APPLIANCE_DATAPLANE_TOKEN"
# The attempt of the job a replica was started for: every call it makes names it.
ATTEMPT_ENV = "APPLIANCE_JOB_ATTEMPT"
# The CA (PEM) a replica verifies the coordinator's certificate by; unset: the coordinator
# serves plaintext (insecure, on loopback only).
COORDINATOR_CA_ENV = "APPLIANCE_COORDINATOR_CA"


def is_loopback(address: str) -> bool:
    """Whether `address` (a host, or host:port, as gRPC targets are written) is on this machine
    only: where plaintext (`--insecure`) is allowed, and nowhere else."""
    host = address.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    if host.startswith("unix:") or host == "localhost":
        return True
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_metadata(token: str) -> tuple[str, str]:
    """The metadata entry that carries `token` to the coordinator."""
    return (AUTH_METADATA_KEY, f"Bearer {token}")


@dataclasses.dataclass(frozen=True)
class Principal:
    user: str
    groups: tuple[str, ...] = ()
    admin: bool = False


def limited_as(principal: Principal | None, claimed: str | None) -> tuple[str, tuple[str, ...]]:
    """Whose limits a call counts against: its principal's (authentication on), else the user
    it claims (a valid name; else anonymous)."""
    if principal is not None:
        return principal.user, principal.groups
    if claimed and len(claimed) <= 253 and _CLAIMED_RE.match(claimed):
        return claimed, ()
    return ANONYMOUS_USER, ()


_CLAIMED_RE = re.compile(r"^[A-Za-z0-9_.@-]+$")


def may_act_on(principal: Principal | None, owner: str, owner_groups: Sequence[str]) -> bool:
    """Whether `principal` (None: authentication is off) may act on and see into a job."""
    if principal is None or principal.admin or principal.user == owner:
        return True
    return bool(set(principal.groups) & set(owner_groups))


def check_may_act_on(
    principal: Principal, owner: str, owner_groups: Sequence[str], what: str
) -> None:
    """Raise PermissionDenied unless `principal` may `what` a job of `owner`."""
    if may_act_on(principal, owner, owner_groups):
        return
    raise PermissionDenied(
        f"{principal.user} may not {what} a job of {owner}: only its owner, members of "
        f"{', '.join(owner_groups) or 'its groups'} and admins may"
    )


def check_may_use_priority(principal: Principal, priority: Priority) -> None:
    if priority is Priority.P0 and not principal.admin:
        raise PermissionDenied("priority P0 is for admins; use p1, p2 or p3", field="priority")


def check_may_submit(principal: Principal, spec: JobSpec) -> None:
    """What only admins may ask for at submit: priority P0, and a job never preempted."""
    check_may_use_priority(principal, spec.priority)
    if not spec.preemptible and not principal.admin:
        raise PermissionDenied(
            "preemptible false (never preempted) is for admins; leave it unset",
            field="preemptible",
        )


def check_may_submit_to(principal: Principal | None, queue: QueueSpec) -> None:
    """Raise PermissionDenied naming the queue unless `principal` (None: authentication is
    off) may submit to it: admins, and members of its groups (anyone, if it names none)."""
    if principal is None or principal.admin or not queue.groups:
        return
    if not set(principal.groups) & set(queue.groups):
        raise PermissionDenied(
            f"{principal.user} may not submit to queue {queue.name}: it is for members of "
            f"{', '.join(queue.groups)}",
            field="queue",
        )


class JobOwner(NamedTuple):
    """Where a job is and whose it is: what a decision to act on it needs."""

    phase: Phase
    user: str
    groups: tuple[str, ...]
