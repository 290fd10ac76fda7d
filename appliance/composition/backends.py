"""The backends by name (APPLIANCE_BACKEND): how each is built from its settings group, and the
one fact about it the settings need before it exists. Adding a backend is an entry here; what
only some backends do is an optional part of the Backend protocol (backends/base.py), never a
test of this name elsewhere. The Kubernetes and simulated backends are imported only when
chosen."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from appliance.backends.base import Backend
from appliance.config import Settings
from appliance.config.groups import KubeSettings
from appliance.services.replicas import ReplicaService

if TYPE_CHECKING:
    from appliance.backends.kubernetes import KubeApi, KubernetesBackend


class StartupError(Exception):
    """The coordinator cannot start with these settings; the message says what to fix."""


@dataclasses.dataclass(frozen=True)
class Making:
    """What a backend is made with besides the settings: the coordinator's replica calls (the
    simulated replicas call them in process), its clock, and how often a simulated chief
    reports its progress at most."""

    calls: ReplicaService
    clock: Callable[[], float]
    report_interval: float = 0.5


@dataclasses.dataclass(frozen=True)
class BackendKind:
    make: Callable[[Settings, Making], Awaitable[Backend]]
    # Where `leader_election: auto` keeps the lease on PostgreSQL: in the cluster the
    # replicas run in (a Lease object), or in the database.
    lease_in: Literal["cluster", "database"] = "database"


async def _local(s: Settings, making: Making) -> Backend:
    from appliance.backends.local import LocalBackend

    lifetimes = s.replicas
    return LocalBackend(
        s.store.data_dir,
        "",
        grace_seconds=lifetimes.cancel_grace_seconds,
        orphan_timeout=lifetimes.orphan_timeout,
        data_plane=lifetimes.data_plane,
    )


async def _kubernetes(s: Settings, making: Making) -> Backend:
    return kube_backend(s, await connect_kube(s.kube))


async def _sim(s: Settings, making: Making) -> Backend:
    from appliance.backends.sim import FailurePlan, SimBackend

    sim = s.sim
    return SimBackend(
        making.calls,
        step_seconds=sim.step_seconds,
        failures=FailurePlan(sim.failure_rate, sim.failures, sim.seed),
        clock=making.clock,
        report_interval=making.report_interval,
    )


BACKENDS: dict[str, BackendKind] = {
    "local": BackendKind(_local),
    "kubernetes": BackendKind(_kubernetes, lease_in="cluster"),
    "sim": BackendKind(_sim),
}


async def make_backend(s: Settings, making: Making) -> Backend:
    """The backend the settings name (StartupError when it cannot be configured)."""
    return await BACKENDS[s.backend].make(s, making)


def election(s: Settings) -> Literal["off", "database", "kubernetes"]:
    """The election `leader_election` comes to with this store and backend: auto is off on
    SQLite, else a lease where the backend keeps it."""
    chosen = s.leases.election
    if chosen != "auto":
        return chosen
    if not s.store.is_postgres:
        return "off"
    return "kubernetes" if BACKENDS[s.backend].lease_in == "cluster" else "database"


def kube_backend(s: Settings, api: KubeApi) -> KubernetesBackend:
    """Replica pods through `api`, as the settings say."""
    from appliance.backends.kubernetes import (
        ROLE_REQUESTS,
        KubernetesBackend,
        PodTemplate,
        Resources,
    )

    kube, lifetimes = s.kube, s.replicas
    chosen = kube.replica_resources
    requests = {
        role: Resources(
            getattr(chosen, role.value).cpu or default.cpu,
            getattr(chosen, role.value).memory or default.memory,
        )
        for role, default in ROLE_REQUESTS.items()
    }
    template = PodTemplate(
        namespace=api.namespace,
        image=kube.image,
        image_pull_policy=kube.image_pull_policy,
        coordinator_address=s.server.coordinator_address,
        grace_seconds=lifetimes.cancel_grace_seconds,
        orphan_timeout=lifetimes.orphan_timeout,
        # Each pod has a network namespace of its own, where no peer's socket can be seen:
        # pods talk gRPC, as before #35 (and run with the normal scheduling policy).
        data_plane="grpc",
        model_dirs=str(s.model_dirs.root.resolve()),
        model_dirs_claim=kube.model_dirs_claim,
        data_sets=kube.data_sets,
        data_sets_claim=kube.data_sets_claim,
        memory_limit=kube.replica_memory_limit,
        requests=requests,
    )
    return KubernetesBackend(
        api,
        template,
        s.store.data_dir / "jobs",
        clean_pod_policy=kube.clean_pod_policy,
        pending_timeout=kube.pending_timeout_seconds,
        watch_timeout_seconds=kube.watch_timeout_seconds,
    )


async def connect_kube(kube: KubeSettings) -> KubeApi:
    """A client of the Kubernetes API from its settings (StartupError when not configured)."""
    from appliance.backends.kubernetes import KubeApi, KubeConfigError

    try:
        return await KubeApi.connect(
            kubeconfig=kube.config,
            namespace=kube.namespace,
            request_timeout=kube.request_timeout_seconds,
        )
    except KubeConfigError as exc:
        raise StartupError(str(exc)) from None
