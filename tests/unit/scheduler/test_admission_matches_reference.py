"""The indexed admission (it jumps over the jobs that cannot start and says their reasons when
asked) decides exactly as the plain walk over every job did, on random queues and pools:
the same jobs admitted on the same nodes, the same heads, the same reason for every job."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.domain.backlog import QueuedJob
from appliance.domain.inventory import Node, NodeKind, NodeState, NodeUsage
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.queues import Quota
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.quotas import Need, QuotaBook
from tests.unit.scheduler import reference_admission

GIB = 1 << 30
QUEUES = ("nlp", "vision", "speech")


@st.composite
def pools(draw: st.DrawFn) -> list[NodeUsage]:
    states = st.sampled_from([NodeState.OK] * 6 + [NodeState.DRAIN, NodeState.ERROR])
    usages = []
    for i in range(draw(st.integers(1, 12))):
        node = Node(f"cs2-{i:02d}", NodeKind.SYSTEM, 1, draw(states))
        usages.append(NodeUsage(node, draw(st.integers(0, 1))))
    for i in range(draw(st.integers(1, 4))):
        capacity = draw(st.sampled_from([4, 8, 16])) * GIB
        node = Node(f"memx-{i:02d}", NodeKind.MEMORYX, capacity, draw(states))
        usages.append(NodeUsage(node, draw(st.sampled_from([0, 0, 2, 4, 8])) * GIB % capacity))
    for i in range(draw(st.integers(1, 3))):
        ports = draw(st.integers(1, 4))
        node = Node(f"swarmx-{i:02d}", NodeKind.SWARMX, ports, draw(states))
        usages.append(NodeUsage(node, draw(st.integers(0, ports))))
    return usages


@st.composite
def jobs(draw: st.DrawFn, queues: tuple[str, ...]) -> list[QueuedJob]:
    out = []
    for i in range(draw(st.integers(0, 40))):
        systems = draw(st.integers(1, 6))
        memx = draw(st.sampled_from([1, 2, 3, 5, 8])) * GIB
        plan = ReplicaPlan(
            groups=(
                ReplicaGroup(Role.CHIEF, 1),
                ReplicaGroup(Role.CS2, systems, demand=1),
                ReplicaGroup(Role.MEMORYX, draw(st.integers(1, 3)), demand=memx),
                ReplicaGroup(Role.SWARMX, draw(st.integers(1, 2)), demand=draw(st.integers(1, 4))),
            ),
            model_bytes=memx,
        )
        priority = draw(st.sampled_from(list(Priority)))
        at = float(draw(st.integers(0, 10)))  # equal submit times: the id decides
        out.append(QueuedJob(f"job-{i:03d}", priority, at, plan, draw(st.sampled_from(queues))))
    return out


@st.composite
def books(draw: st.DrawFn) -> tuple[dict[str, Quota], dict[str, Need], dict[str, float]] | None:
    if draw(st.booleans()):
        return None  # one default queue owning the pool
    quotas = {}
    for name in QUEUES[: draw(st.integers(2, 3))]:
        borrow = st.none() | st.integers(0, 6)
        quotas[name] = Quota(
            draw(st.integers(0, 8)),
            draw(st.integers(0, 32)) * GIB,
            draw(borrow),
            None if draw(st.booleans()) else draw(st.integers(0, 16)) * GIB,
            lend=draw(st.booleans()),
        )
    used = {n: Need(draw(st.integers(0, 4)), draw(st.integers(0, 8)) * GIB) for n in quotas}
    shares = {n: draw(st.floats(0, 2)) for n in quotas if draw(st.booleans())}
    return quotas, used, shares


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=pools(), book=books(), data=st.data())
def test_indexed_admission_decides_and_explains_as_the_plain_walk(
    pool: list[NodeUsage],
    book: tuple[dict[str, Quota], dict[str, Need], dict[str, float]] | None,
    data: st.DataObject,
) -> None:
    queue = data.draw(jobs(QUEUES if book else ("default",)))
    skip = {j.job_id for j in queue if data.draw(st.integers(0, 9)) == 0}  # wait for others

    def fresh() -> tuple[QuotaBook | None, dict[str, float] | None]:
        if book is None:
            return None, None
        quotas, used, shares = book
        return QuotaBook(quotas, used), shares

    expected = reference_admission.admit(
        [j for j in queue if j.job_id not in skip], pool, *fresh()
    )
    got = admit_backlog(BacklogIndex(queue), pool, *fresh(), skip=skip)

    assert [(d.job_id, d.placements) for d in got.admitted] == [
        (d.job_id, d.placements) for d in expected.admitted
    ]
    assert [(h.job.job_id, h.within_quota) for h in got.heads] == [
        (h.job.job_id, h.within_quota) for h in expected.heads
    ]
    assert got.pending == expected.pending
    for job_id, reason in expected.pending.items():
        assert got.reason(job_id) == reason

    # A pass that stops at a limit admits the first jobs the whole pass does, and says of the
    # jobs it reached what the whole pass says.
    limit = data.draw(st.integers(1, 4))
    capped = admit_backlog(BacklogIndex(queue), pool, *fresh(), skip=skip, limit=limit)
    assert [d.job_id for d in capped.admitted] == [d.job_id for d in got.admitted][:limit]
    assert capped.capped == (len(got.admitted) >= limit)
    for job_id, reason in expected.pending.items():
        assert capped.reason(job_id) in (None, reason)
