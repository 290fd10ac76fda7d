"""The start-up check that the pool's largest job fits the nodes (pure: capacity.py)."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.backends.kubernetes.capacity import fit_problem, largest_job, node_room
from appliance.backends.kubernetes.manifests import PodTemplate, Resources
from appliance.backends.kubernetes.quantities import cpu_millis, memory_bytes
from appliance.domain.inventory import default_pool
from appliance.domain.plan import Role

POOL = default_pool(systems=4, memoryx=4, swarmx=2, swarmx_ports=4)
TEMPLATE = PodTemplate("ml", "appliance:dev", "IfNotPresent", "appliance:50051", 5.0, 60.0)


def node(cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    return {"spec": spec, "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


@pytest.mark.parametrize(
    ("quantity", "millis"), [("250m", 250), ("2", 2000), ("1.5", 1500), ("3920092n", 3.920092)]
)
def test_cpu_quantities(quantity: str, millis: float) -> None:
    assert cpu_millis(quantity) == pytest.approx(millis)


def test_memory_quantities() -> None:
    assert memory_bytes("512Mi") == 512 << 20
    assert memory_bytes("8025424Ki") == 8025424 << 10
    assert memory_bytes("1G") == 10**9
    with pytest.raises(ValueError, match="not a memory quantity"):
        memory_bytes("1Qi")


def test_the_largest_job_takes_every_system_and_memoryx_node() -> None:
    assert largest_job(POOL) == {
        Role.CHIEF: 1, Role.CS2: 4, Role.MEMORYX: 4, Role.SWARMX: 1, Role.WORKER: 4,
    }  # fmt: skip


def test_the_largest_job_has_an_input_worker_per_system_only_where_there_are_worker_nodes() -> (
    None
):
    no_workers = default_pool(workers=0)
    assert Role.WORKER not in largest_job(no_workers)
    assert largest_job(default_pool(workers=1, worker_slots=2))[Role.WORKER] == 2


def test_the_2_cpu_node_of_the_report_cannot_hold_a_4_cs2_job() -> None:
    """What was found on a real single-node cluster: 4 CS-2 pods pending, Insufficient cpu."""
    problem = fit_problem(POOL, TEMPLATE.requests_of, [node("2", "8025424Ki")])
    assert problem is not None
    assert "1 chief, 4 cs2, 4 memoryx, 1 swarmx, 4 worker replicas: 3.75 CPU, 5.50 GiB" in problem
    assert "1 schedulable node(s) (2.00 CPU, 7.65 GiB)" in problem
    assert "replicaResources" in problem


def test_smaller_requests_or_more_nodes_fit() -> None:
    small = PodTemplate(
        "ml", "appliance:dev", "IfNotPresent", "appliance:50051", 5.0, 60.0,
        requests={role: Resources("50m", "256Mi") for role in Role},
    )  # fmt: skip
    assert fit_problem(POOL, small.requests_of, [node("2", "8025424Ki")]) is None
    assert fit_problem(POOL, TEMPLATE.requests_of, [node("2", "8Gi"), node("2", "8Gi")]) is None


def test_a_pod_larger_than_any_node_does_not_fit_however_many_nodes() -> None:
    """The totals would fit; no single node holds one CS-2 pod."""
    big = PodTemplate(
        "ml", "appliance:dev", "IfNotPresent", "appliance:50051", 5.0, 60.0,
        requests={**TEMPLATE.requests, Role.CS2: Resources("3", "512Mi")},
    )  # fmt: skip
    assert fit_problem(POOL, big.requests_of, [node("2", "64Gi")] * 10) is not None


def test_cordoned_and_tainted_nodes_do_not_count() -> None:
    taint = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    assert node_room(node("64", "256Gi", unschedulable=True)) is None
    assert node_room(node("64", "256Gi", taints=[taint])) is None
    assert node_room({"status": {}}) is None
    prefer = {"key": "x", "effect": "PreferNoSchedule"}
    assert node_room(node("64", "256Gi", taints=[prefer])) is not None
    nodes = [node("64", "256Gi", unschedulable=True), node("64", "256Gi", taints=[taint])]
    assert fit_problem(POOL, TEMPLATE.requests_of, nodes) is not None
