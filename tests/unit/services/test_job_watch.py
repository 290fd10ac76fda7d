"""Which changed jobs a watch of a list query sends (services/job_watch.py)."""

from __future__ import annotations

from appliance.domain.job import Job
from appliance.domain.listing import JobQuery
from appliance.domain.phases import Phase
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import JobSpec
from appliance.services.job_watch import query_matches


def _job(phase: Phase = Phase.QUEUED, user: str = "alice", **labels: str) -> Job:
    spec = JobSpec(params_yaml="", num_csx=1, num_steps=1, labels=labels)
    return Job(id="wsjob-a", user=user, spec=spec, phase=phase, created_at=1.0, updated_at=1.0)


def test_a_watch_of_active_jobs_sends_an_ended_job_once_in_its_final_phase() -> None:
    active = JobQuery()
    done = _job(Phase.CANCELLED)

    assert query_matches(active, _job(Phase.RUNNING))
    assert query_matches(active, done, ended=True)  # the change that ended it
    assert not query_matches(active, done)  # a later change (its labels): not listed
    assert query_matches(JobQuery(include_terminal=True), done)
    assert not query_matches(JobQuery(phases=frozenset({Phase.QUEUED})), done, ended=True)


def test_user_labels_and_selector_filter_as_the_listing_does() -> None:
    query = JobQuery(
        user="alice", labels={"team": "nlp"}, selector=parse_selector("tmp notin (1),!skip")
    )

    assert query_matches(query, _job(team="nlp"))
    assert query_matches(query, _job(team="nlp", tmp="2"))
    assert not query_matches(query, _job(team="nlp", tmp="1"))
    assert not query_matches(query, _job(team="nlp", skip="y"))
    assert not query_matches(query, _job(team="cv"))
    assert not query_matches(query, _job(user="bob", team="nlp"))
