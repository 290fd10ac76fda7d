"""The coordinator reads a job's metrics.jsonl as the replicas write model dirs: never through
a link planted there, never waiting on a FIFO, bounded however large the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from appliance.domain.curves import METRICS_FILE
from appliance.domain.errors import NotFound
from appliance.domain.spec import validate_spec
from appliance.services import job_curves
from appliance.services.job_curves import read_curves
from tests.unit.harness import PARAMS, job_service, store_context


def write_steps(model_dir: Path, steps: range, tail: str = "") -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "loss": 1.0 / s, "learning_rate": 0.003}) for s in steps]
    (model_dir / METRICS_FILE).write_text("\n".join(lines) + "\n" + tail)


def test_the_curves_from_the_first_step_without_the_line_being_written(tmp_path: Path) -> None:
    write_steps(tmp_path / "job", range(1, 31), tail='{"step": 31, "lo')
    curves = read_curves(str(tmp_path / "job"))
    assert [p.step for p in curves.train] == list(range(1, 31))
    assert curves.problem == "" and not curves.thinned


def test_no_model_dir_or_no_file_yet_is_no_curve(tmp_path: Path) -> None:
    assert read_curves("") == read_curves(str(tmp_path / "missing")) == read_curves(str(tmp_path))
    assert read_curves(str(tmp_path)).train == ()


def test_a_link_planted_as_the_file_is_not_followed(tmp_path: Path) -> None:
    write_steps(tmp_path / "elsewhere", range(1, 5))
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / METRICS_FILE).symlink_to(tmp_path / "elsewhere" / METRICS_FILE)
    curves = read_curves(str(tmp_path / "job"))
    assert curves.train == () and "symbolic link" in curves.problem


def test_a_link_planted_on_the_way_is_not_followed(tmp_path: Path) -> None:
    write_steps(tmp_path / "elsewhere", range(1, 5))
    (tmp_path / "job").symlink_to(tmp_path / "elsewhere")
    curves = read_curves(str(tmp_path / "job"))
    assert curves.train == () and "symbolic link" in curves.problem


def test_a_fifo_or_a_directory_under_the_name_is_refused_at_once(tmp_path: Path) -> None:
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / METRICS_FILE)  # a blocking open would wait for a writer
    (tmp_path / "dir" / METRICS_FILE).mkdir(parents=True)
    for name in ("fifo", "dir"):
        curves = read_curves(str(tmp_path / name))
        assert curves.train == () and "not a regular file" in curves.problem, name


def test_a_path_that_is_not_canonical_is_refused(tmp_path: Path) -> None:
    write_steps(tmp_path / "job", range(1, 3))
    assert "canonical" in read_curves(f"{tmp_path}/job/../job").problem


def test_a_large_file_is_read_in_parts_from_the_first_step_to_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_curves, "MAX_BYTES", 64 * 1024)  # our own bound, made small
    write_steps(tmp_path / "job", range(1, 20_001))
    size = (tmp_path / "job" / METRICS_FILE).stat().st_size
    assert size > 10 * job_curves.MAX_BYTES
    curves = read_curves(str(tmp_path / "job"))
    trained = [p.step for p in curves.train]
    assert curves.thinned and trained[0] == 1 and trained[-1] == 20_000
    assert trained == sorted(set(trained))
    assert len(trained) < job_curves.MAX_BYTES / 40  # no more than was read


async def test_the_use_case_reads_the_model_dir_the_job_was_given(tmp_path: Path) -> None:
    async with store_context(tmp_path) as ctx:
        jobs = job_service(ctx)
        job = await jobs.submit(validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5), "al")
        assert (await jobs.curves(job.id)).train == ()  # nothing written yet
        write_steps(Path(job.spec.model_dir), range(1, 6))
        assert [p.step for p in (await jobs.curves(job.id)).train] == [1, 2, 3, 4, 5]
        with pytest.raises(NotFound):
            await jobs.curves("wsjob-0a1b2c3d4e5f6g")


def write_jobs_steps(model_dir: Path, runs: list[tuple[str, range]]) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"step": s, "loss": 1.0 / s, "learning_rate": 0.003, "job": job})
        for job, steps in runs
        for s in steps
    ]
    (model_dir / METRICS_FILE).write_text("\n".join(lines) + "\n")


def test_a_jobs_curves_stop_at_its_last_line_not_at_a_later_jobs(tmp_path: Path) -> None:
    """A later job resumed in the same model dir appends to the file: the first job's page
    must still show its own run (it showed the later run's points)."""
    model_dir = tmp_path / "job"
    write_jobs_steps(model_dir, [("wsjob-a", range(1, 101)), ("wsjob-b", range(101, 201))])
    assert [p.step for p in read_curves(str(model_dir), "wsjob-a").train] == list(range(1, 101))
    # The later job's history is the whole file: it continued the first one's run.
    assert [p.step for p in read_curves(str(model_dir), "wsjob-b").train] == list(range(1, 201))


def test_a_job_whose_run_a_later_one_set_aside_is_read_from_earlier_runs(tmp_path: Path) -> None:
    """A later job that started over moved this one's files to earlier_runs/<n>/."""
    model_dir = tmp_path / "job"
    write_jobs_steps(model_dir / "earlier_runs" / "1", [("wsjob-a", range(1, 101))])
    write_jobs_steps(model_dir, [("wsjob-b", range(1, 51))])
    assert [p.step for p in read_curves(str(model_dir), "wsjob-a").train] == list(range(1, 101))
    assert [p.step for p in read_curves(str(model_dir), "wsjob-b").train] == list(range(1, 51))
    assert read_curves(str(model_dir), "wsjob-elsewhere").train == ()
    # Before the later job wrote its first line, too.
    (model_dir / METRICS_FILE).unlink()
    assert len(read_curves(str(model_dir), "wsjob-a").train) == 100


def test_lines_that_name_no_job_are_all_read(tmp_path: Path) -> None:
    write_steps(tmp_path / "job", range(1, 11))
    assert len(read_curves(str(tmp_path / "job"), "wsjob-a").train) == 10
