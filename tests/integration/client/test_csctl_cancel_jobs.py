"""`csctl cancel jobs` against the real coordinator: one request for a selection, the count it
prints, and bad selections refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.client.conftest import Csctl, hold_queue
from tests.integration.coordinator.harness import RunningCoordinator


def test_cancel_jobs_mine_queued_cancels_in_one_request_and_prints_the_count(
    coordinator: RunningCoordinator, observer: ApplianceClient, csctl: Csctl, params_file: Path
) -> None:
    hold_queue(coordinator)
    mine = [observer.submit(params=params_file, num_csx=1, num_steps=5).id for _ in range(3)]
    tagged = observer.submit(params=params_file, num_csx=1, num_steps=5, labels={"keep": "no"})

    labelled = csctl("cancel", "jobs", "-l", "keep=no")
    assert (labelled.exit_code, labelled.stdout) == (0, "cancelled 1 job\n")
    assert observer.get_job(tagged.id).phase is Phase.CANCELLED

    result = csctl("cancel", "jobs", "--mine", "--queued")
    assert (result.exit_code, result.stdout) == (0, "cancelled 3 jobs\n")
    assert {observer.get_job(j).phase for j in mine} == {Phase.CANCELLED}
    assert observer.get_job(mine[0]).reason == "cancelled with csctl"

    again = csctl("cancel", "jobs", "--mine")
    assert (again.exit_code, again.stdout) == (0, "No active job matched; nothing cancelled.\n")

    by_id = csctl("cancel", "jobs", mine[0], "wsjob-000000000000")
    assert by_id.exit_code == 1
    assert by_id.stdout == "cancelled 0 jobs\n1 already finished; nothing to do\n"
    assert by_id.stderr == "error: 1 not found: wsjob-000000000000\n"

    assert csctl("cancel", "job", mine[1]).exit_code == 0  # the one-id form still works


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "say whose jobs to cancel"),
        (("--queued",), "phases only narrow"),
        (("--mine", "--phase", "done"), "'done' is not a phase"),
        (("--mine", "--phase", "succeeded"), "SUCCEEDED is a finished phase"),
        (("--user", "no such/user"), "user must be 1-253 characters"),
        (("--mine", "wsjob-000000000000"), "not both"),
        (("--mine", "--reason", "x" * 2000), "reason must be at most 1024"),
    ],
)
def test_a_bad_selection_is_one_error_line_and_exit_1(
    csctl: Csctl, args: tuple[str, ...], says: str
) -> None:
    result = csctl("cancel", "jobs", *args)

    assert result.exit_code == 1, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and says in line and len(line) < 300
