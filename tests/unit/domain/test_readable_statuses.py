"""What print() shows of the client's events and statuses: a line a person reads, not a repr
(`JobEvent(job_id=…, kind=<EventKind.PHASE: 'phase'>, …)`)."""

from __future__ import annotations

from appliance.domain.job import EventKind, Job, JobEvent, Progress
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec

JOB = "wsjob-0123456789abcd"


def test_a_phase_event_reads_as_a_change_and_its_reason() -> None:
    event = JobEvent(
        JOB, EventKind.PHASE, 1.0, 2, Phase.QUEUED, Phase.SCHEDULED, "reserved cs2-01"
    )
    assert str(event) == f"{JOB}: QUEUED -> SCHEDULED: reserved cs2-01"
    assert str(JobEvent(JOB, EventKind.PHASE, 1.0, 1, None, Phase.QUEUED)) == f"{JOB}: QUEUED"


def test_a_progress_event_reads_as_the_progress() -> None:
    progress = Progress(step=40, num_steps=100, loss=0.12344, steps_per_second=12.5)
    event = JobEvent(JOB, EventKind.PROGRESS, 1.0, progress=progress)
    assert str(event) == f"{JOB}: step 40/100  loss 0.1234  12.5 steps/s"


def test_progress_gives_the_newest_evaluation_once_there_is_one() -> None:
    progress = Progress(step=6, num_steps=6, loss=2.5, eval_loss=2.125, eval_accuracy=0.391)
    assert str(progress) == "step 6/6  loss 2.5000  eval loss 2.1250  accuracy 39.1%"


def test_a_status_reads_as_its_phase_reason_and_progress() -> None:
    spec = JobSpec(params_yaml="", num_csx=1, num_steps=200)
    done = Job(
        JOB, "alice", spec, Phase.SUCCEEDED, 1.0, 2.0, reason="chief finished all steps",
        progress=Progress(step=200, num_steps=200, loss=2.0091),
    )  # fmt: skip
    assert str(done) == f"{JOB} SUCCEEDED: chief finished all steps (step 200/200  loss 2.0091)"
    queued = Job(JOB, "alice", spec, Phase.QUEUED, 1.0, 1.0, pending_reason="needs 1 system")
    assert str(queued) == f"{JOB} QUEUED: needs 1 system"


def test_what_others_wrote_cannot_drive_the_terminal() -> None:
    event = JobEvent(JOB, EventKind.PHASE, 1.0, 2, Phase.RUNNING, Phase.FAILED, "\x1b[2Jboom")
    assert "\x1b" not in str(event) and "\\x1b[2Jboom" in str(event)
