"""csctl's one error line: the server's sentence, and for a job that does not exist (a NotFound
naming the job_id field, as the coordinator sends it) how to list the jobs that do."""

from __future__ import annotations

from appliance.domain.errors import Conflict, NotFound, job_not_found
from csctl.session import error_line


def test_a_missing_job_says_how_to_list_jobs() -> None:
    assert error_line(job_not_found("wsjob-000000000000")) == (
        "job wsjob-000000000000 not found; list jobs with `csctl get jobs -a`"
    )


def test_other_errors_are_the_servers_sentence_as_it_is() -> None:
    assert error_line(NotFound("job wsjob-a has no replica 'cs2-9'")) == (
        "job wsjob-a has no replica 'cs2-9'"
    )
    assert error_line(Conflict("job wsjob-a is CANCELLED", field="job_id")) == (
        "job wsjob-a is CANCELLED"
    )
    assert error_line(TimeoutError("no answer in 5 s")) == "no answer in 5 s"
