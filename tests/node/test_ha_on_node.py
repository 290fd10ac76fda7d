"""Two coordinators on the real node: one leads by a Lease, the other stands by; the leader's
container killed by the runtime hands over to a coordinator that adopts the running job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from appliance.domain.errors import ApplianceError
from appliance.domain.phases import Phase
from tests.kube.node import RealNode, wait_for
from tests.node.ha import PARAMS, HaRelease, ha_release
from tests.node.test_chart_on_node import _all_running

NAMESPACE = "appliance-ha"
# A shorter lease than the chart's 8 s (bench/real_node.py measures the default's failover): a
# standby takes over ~5 s after the leader's death instead of ~9 s. (Whole seconds: helm's --set
# gives 0.5 as a string, which the chart's schema refuses.)
LEASE = (
    "--set", "settings.leaseDurationSeconds=4", "--set", "settings.leaseRenewDeadlineSeconds=3",
)  # fmt: skip
# ~30 steps/s for a 2-CS-2 job on CI's node: ~35 s, several times the handover and adoption.
RUNNING_STEPS = 1000


@pytest.fixture(scope="module")
def ha(node: RealNode) -> Iterator[HaRelease]:
    with ha_release(node, NAMESPACE, *LEASE) as release:
        yield release


def test_one_coordinator_leads_by_the_lease_and_the_other_stands_by(ha: HaRelease) -> None:
    pods = ha.pods()
    assert len(pods) == 2
    leader = wait_for(ha.leader_pod, "a leader")
    lease = ha.lease()["spec"]
    assert lease["holderIdentity"].startswith(leader), lease
    (standby,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != leader]
    with (
        pytest.raises(ApplianceError, match="this coordinator is a standby; the leader is"),
        ha.client(standby) as client,
    ):
        client.list_jobs(all=True)


def test_the_leader_killed_by_the_runtime_hands_over_and_the_job_is_adopted(
    node: RealNode, ha: HaRelease
) -> None:
    leader = wait_for(ha.leader_pod, "a leader")
    epoch = int(ha.lease()["spec"].get("leaseTransitions", 0))
    with ha.client(leader) as client:
        running = client.submit(
            params=str(PARAMS), num_csx=2, num_steps=RUNNING_STEPS, detach=True
        )
        wait_for(lambda: _all_running(node, NAMESPACE, running.id, 5), "5 running containers")
    ha.kill_leader()
    # Whichever coordinator is elected next takes jobs again, and adopts the running one.
    new_job, via = ha.submit_to_leader(num_steps=20)
    assert int(ha.lease()["spec"].get("leaseTransitions", 0)) > epoch
    with ha.client(via) as client:
        assert client.job(new_job).wait(timeout=300).phase == Phase.SUCCEEDED
        done = client.job(running.id).wait(timeout=300)
        assert done.phase == Phase.SUCCEEDED, done.reason
        full = client.get_job(running.id)
        # Adopted, not restarted: the same attempt, the same containers ran it to the end.
        assert full.attempt == 1 and full.restarts == 0, (full.attempt, full.restarts)
