"""`fits` (scheduler/placement.py) answers what `fit` would, without placing: the preemption
search asks it for every set of victims it tries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.domain.inventory import NodeKind
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.scheduler.placement import KIND_OF_ROLE, fit, fits

ROLES = [Role.CHIEF, Role.CS2, Role.MEMORYX, Role.SWARMX, Role.WORKER]


@st.composite
def pools(draw: st.DrawFn) -> dict[str, tuple[NodeKind, int]]:
    """Nodes of every kind, some used beyond their capacity (negative room)."""
    nodes: dict[str, tuple[NodeKind, int]] = {}
    for kind in NodeKind:
        for i in range(draw(st.integers(0, 5))):
            nodes[f"{kind.value}-{i}"] = (kind, draw(st.integers(-2, 9)))
    return nodes


plans = st.lists(
    st.tuples(st.sampled_from(ROLES), st.integers(0, 6), st.integers(0, 4)), max_size=5
).map(
    lambda groups: ReplicaPlan(
        tuple(ReplicaGroup(role, count, demand) for role, count, demand in groups), 0
    )
)


@settings(max_examples=600, deadline=None)
@given(pools(), plans)
def test_fits_says_what_fit_would_place_whole(
    nodes: dict[str, tuple[NodeKind, int]], plan: ReplicaPlan
) -> None:
    free = {name: room for name, (_, room) in nodes.items()}
    kinds = {name: kind for name, (kind, _) in nodes.items()}
    names: dict[NodeKind, list[str]] = {}
    for name, kind in kinds.items():
        names.setdefault(kind, []).append(name)
    assert fits(plan, free, names) == (not fit(plan, free, kinds)[1])


def test_groups_sharing_a_kind_are_fitted_together() -> None:
    # Each group alone has room on the one SwarmX node; together they do not.
    plan = ReplicaPlan((ReplicaGroup(Role.SWARMX, 2, 3), ReplicaGroup(Role.SWARMX, 1, 3)), 0)
    assert KIND_OF_ROLE[Role.SWARMX] is NodeKind.SWARMX
    names = {NodeKind.SWARMX: ["swarmx-0"]}
    assert not fits(plan, {"swarmx-0": 8}, names)
    assert fits(plan, {"swarmx-0": 9}, names)
