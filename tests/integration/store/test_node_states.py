"""The JobStore contract for an admin's change of a node's state: written with why, when and by
whom, recorded as a node event, and answered with the jobs holding the node. Run against every
backend."""

from __future__ import annotations

from appliance.domain.inventory import NodeState
from appliance.store.jobs import JobStore
from tests.integration.store.driving import T0, placements_for, submit


def test_a_state_change_is_recorded_and_names_the_jobs_on_the_node(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=1)
    assert store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 1).applied
    (system,) = store.get_job("wsjob-a").systems

    changed = store.change_node_state(system, NodeState.ERROR, "fan", "root", T0 + 2)
    assert changed is not None
    node, holders = changed
    assert (node.state, node.reason, node.since) == (NodeState.ERROR, "fan", T0 + 2)
    assert holders == [("wsjob-a", 1)]
    assert store.change_node_state("cs2-99", NodeState.OK, "", "root", T0) is None

    store.change_node_state(system, NodeState.OK, "fixed", "root", T0 + 3)
    events = store.node_events(system)
    assert [(e.state, e.reason, e.by, e.time) for e in events] == [
        (NodeState.ERROR, "fan", "root", T0 + 2),
        (NodeState.OK, "fixed", "root", T0 + 3),
    ]
    (usage,) = [u for u in store.pool_usage() if u.node.name == system]
    assert (usage.node.state, usage.node.reason, usage.used) == (NodeState.OK, "fixed", 1)


def test_one_nodes_usage_is_what_the_pool_usage_says_of_it(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=2)
    store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 1)
    pool = {u.node.name: u for u in store.pool_usage()}

    for name in ("cs2-01", "cs2-02", "cs2-03", *(n for n, u in pool.items() if u.used > 1)):
        assert store.node_usage(name) == pool[name]
    assert store.node_usage("cs2-01") is not None and store.node_usage("cs2-01").used == 1
    assert store.node_usage("no-such-node") is None
