"""Ages, labels and tables as csctl prints them."""

from __future__ import annotations

import pytest

from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec
from csctl.job_tables import SortBy, duration, estimated_start, parse_sort_by
from csctl.render import Table, format_age, format_labels, format_table


@pytest.mark.parametrize(
    ("seconds", "age"),
    [(-5, "0s"), (0, "0s"), (42, "42s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
     (299, "4m59s"), (600, "10m"), (3600, "60m"), (3 * 3600, "3h"), (5 * 3600 + 180, "5h3m"),
     (18 * 3600 + 59, "18h"), (2 * 86400 + 3 * 3600, "2d3h"), (86400 * 3 + 7, "3d"),
     (86400 * 9, "9d"), (86400 * 800, "2y70d"), (86400 * 365 * 9, "9y")],
)  # fmt: skip
def test_format_age_as_kubectl(seconds: float, age: str) -> None:
    assert format_age(seconds) == age


def test_labels_are_sorted_key_value_pairs() -> None:
    assert format_labels({"team": "nlp", "model": "gpt3"}.items()) == "model=gpt3,team=nlp"


def test_table_columns_line_up() -> None:
    table = format_table(("NAME", "AGE"), [["wsjob-a", "5m"], ["x", ""]])

    assert table.splitlines() == ["NAME      AGE", "wsjob-a   5m", "x"]


def _job(**fields: object) -> Job:
    spec = JobSpec(params_yaml="", num_csx=1, num_steps=10, labels={"team": "nlp"})
    values: dict[str, object] = {
        "id": "wsjob-a", "user": "alice", "spec": spec, "phase": Phase.QUEUED,
        "created_at": 1000.0, "updated_at": 1000.0, **fields,
    }  # fmt: skip
    return Job(**values)  # type: ignore[arg-type]


def test_duration_runs_until_the_job_ended_or_now() -> None:
    assert duration(_job(), 2000.0) == "-"  # never ran
    assert duration(_job(phase=Phase.RUNNING, started_at=1100.0), 1250.0) == "2m30s"
    done = _job(phase=Phase.SUCCEEDED, started_at=1100.0, finished_at=1100.0 + 5 * 3600 + 180)
    assert duration(done, 99_999.0) == "5h3m"


def test_the_estimated_start_is_marked_as_one_and_only_for_queued_jobs() -> None:
    assert estimated_start(_job(estimated_start=1150.0), 1000.0) == "~2m30s"
    assert estimated_start(_job(estimated_start=900.0), 1000.0) == "~0s"  # due
    assert estimated_start(_job(), 1000.0) == "-"  # no estimate
    assert estimated_start(_job(phase=Phase.RUNNING, estimated_start=1150.0), 1000.0) == "-"


def test_sort_by_names_a_column_or_a_document_field() -> None:
    fields = frozenset({("spec", "priority"), ("progress", "step")})
    assert parse_sort_by("priority", fields) == SortBy(column="PRIORITY")
    assert parse_sort_by("{.spec.priority}", fields) == SortBy(path=("spec", "priority"))
    assert parse_sort_by(".spec.labels.team", fields) == SortBy(path=("spec", "labels", "team"))
    with pytest.raises(ValueError, match=r"unknown field '\.spec\.colour'; sort by a column"):
        parse_sort_by(".spec.colour", fields)
    with pytest.raises(ValueError, match="unknown field ''"):
        parse_sort_by("", fields)


def test_a_watched_row_keeps_the_tables_widths() -> None:
    table = Table(("NAME", "PHASE"), [["wsjob-a", "QUEUED"]])
    assert table.lines == ["NAME      PHASE", "wsjob-a   QUEUED"]
    assert table.row(["b", "RUNNING"]) == "b         RUNNING"
    assert table.row(["wsjob-longer-name", "X"]) == "wsjob-longer-name   X"
