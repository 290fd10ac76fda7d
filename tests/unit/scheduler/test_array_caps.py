"""An array's cap of tasks running at once (`--array 0-31%4`) in admission: a task over it
waits with ArrayTaskLimit, is stepped over (never a head), and what the pass admits counts."""

from __future__ import annotations

from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.array_caps import ArrayCaps
from appliance.scheduler.backlog_index import BacklogIndex
from tests.unit.scheduler.test_gang_admission import GIB, admitted, job, pool

ARRAY = "wsjob-aaaaaaaaaaaaaa"


def test_tasks_over_the_cap_wait_and_other_jobs_go_on() -> None:
    queue = [job(f"{ARRAY}_{i}", 1, at=i) for i in range(4)] + [job("other", 1, at=9)]
    decision = admit_backlog(BacklogIndex(queue), pool(8), arrays=ArrayCaps({ARRAY: (2, 0)}))
    assert admitted(decision) == [f"{ARRAY}_0", f"{ARRAY}_1", "other"]
    why = decision.why(f"{ARRAY}_2")
    assert why is not None and why.code is ReasonCode.ARRAY_TASK_LIMIT
    assert decision.pending_reasons[f"{ARRAY}_3"].code is ReasonCode.ARRAY_TASK_LIMIT
    assert decision.heads == ()  # stepped over: holds nothing back


def test_tasks_already_running_count_and_backfill_steps_over_capped_tasks() -> None:
    # The head waits for MemoryX; one task of the array runs, its cap is 1: the task behind
    # the head, which would fit, is stepped over and the job after it is admitted.
    queue = [
        job("head", 2, priority=Priority.P1, memx_bytes=32 * GIB),
        job(f"{ARRAY}_5", 1, at=1),
        job("small", 1, at=2),
    ]
    decision = admit_backlog(BacklogIndex(queue), pool(4), arrays=ArrayCaps({ARRAY: (1, 1)}))
    assert [h.job.job_id for h in decision.heads] == ["head"]
    assert admitted(decision) == ["small"]
    why = decision.why(f"{ARRAY}_5")
    assert why is not None and why.code is ReasonCode.ARRAY_TASK_LIMIT


def test_uncapped_arrays_and_plain_jobs_are_not_limited() -> None:
    queue = [job(f"{ARRAY}_{i}", 1, at=i) for i in range(3)]
    other = ArrayCaps({"wsjob-bbbbbbbbbbbbbb": (1, 1)})
    assert len(admitted(admit_backlog(BacklogIndex(queue), pool(4), arrays=other))) == 3
