"""The checkpoint a job starts from is chosen at submit, recorded in its params, and a job that
cannot start is refused before anything is stored or reserved (services/checkpoint_choice.py).
Real model dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import JobSpec, Mode, checkpoint_path_of, validate_spec
from appliance.services.checkpoint_choice import choose_checkpoint
from appliance.services.context import Context
from appliance.services.jobs import JobService
from tests.unit.harness import job_service


def spec(model_dir: Path, mode: Mode = Mode.TRAIN, **runconfig: Any) -> JobSpec:
    params: dict[str, Any] = {"model": {"name": "fc_mnist"}}
    if runconfig:
        params["runconfig"] = runconfig
    return validate_spec(
        params_yaml=params, num_csx=1, num_steps=20, mode=mode, model_dir=str(model_dir)
    )


def checkpoints(model_dir: Path, *steps: int) -> None:
    model_dir.mkdir(exist_ok=True)
    for step in steps:
        (model_dir / f"checkpoint_{step}.npz").write_bytes(b"")


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


async def test_eval_with_no_checkpoint_is_refused_at_submit_naming_model_dir(
    ctx: Context, jobs: JobService, tmp_path: Path
) -> None:
    for model_dir in (tmp_path / "missing", tmp_path):
        with pytest.raises(InvalidSpec, match="mode eval evaluates a checkpoint") as refused:
            await jobs.submit(spec(model_dir, Mode.EVAL), "alice")
        assert refused.value.field == "model_dir"
    eval_anywhere = validate_spec(
        params_yaml="model: {name: fc_mnist}", num_csx=1, num_steps=1, mode="eval"
    )
    with pytest.raises(InvalidSpec, match="mode eval"):  # its own new dir holds none either
        await jobs.submit(eval_anywhere, "alice")
    assert ctx.store.count_by_phase() == {}  # nothing stored, nothing reserved


async def test_eval_records_the_newest_checkpoint_it_evaluates(
    jobs: JobService, tmp_path: Path
) -> None:
    checkpoints(tmp_path, 5, 40, 100)
    (tmp_path / "checkpoint_200.npz").symlink_to(tmp_path / "checkpoint_5.npz")  # not one
    job = await jobs.submit(spec(tmp_path, Mode.EVAL), "alice")
    assert checkpoint_path_of(job.spec) == str(tmp_path / "checkpoint_100.npz")
    assert "checkpoint_100.npz" in job.spec.params_yaml  # what `csctl describe job` shows


async def test_a_training_job_continues_from_the_newest_checkpoint(
    jobs: JobService, tmp_path: Path
) -> None:
    checkpoints(tmp_path, 5, 10)
    job = await jobs.submit(spec(tmp_path), "alice")
    assert checkpoint_path_of(job.spec) == str(tmp_path / "checkpoint_10.npz")
    fresh = await jobs.submit(spec(tmp_path / "new"), "alice")
    assert checkpoint_path_of(fresh.spec) is None


def test_a_checkpoint_asked_for_or_starting_over_is_left_as_asked(tmp_path: Path) -> None:
    checkpoints(tmp_path, 5, 10)
    given = spec(tmp_path, checkpoint_path=str(tmp_path / "checkpoint_5.npz"))
    assert choose_checkpoint(given) is given
    over = spec(tmp_path, autoload_last_checkpoint=False)
    assert choose_checkpoint(over) is over
    assert checkpoint_path_of(choose_checkpoint(spec(tmp_path, Mode.TRAIN_AND_EVAL))) == str(
        tmp_path / "checkpoint_10.npz"
    )


def test_a_model_dir_already_past_num_steps_is_refused_naming_num_steps(tmp_path: Path) -> None:
    checkpoints(tmp_path, 20)
    with pytest.raises(InvalidSpec, match=r"already holds checkpoint_20\.npz") as refused:
        choose_checkpoint(spec(tmp_path))
    assert refused.value.field == "num_steps"


def test_an_eval_waiting_for_a_job_is_given_its_checkpoint_at_start(tmp_path: Path) -> None:
    waits = validate_spec(
        params_yaml="model: {name: fc_mnist}", num_csx=1, num_steps=1, mode="eval",
        model_dir=str(tmp_path), depends_on=["wsjob-0123456789abcd"],
    )  # fmt: skip
    assert checkpoint_path_of(choose_checkpoint(waits)) is None


def test_starting_over_is_honoured_beside_keys_accepted_and_not_used(tmp_path: Path) -> None:
    # The workshop's runconfig has save_losses (accepted with a warning, not a RunConfig field):
    # it must not make autoload_last_checkpoint: false read as the default, true (#32).
    checkpoints(tmp_path, 20)
    over = spec(tmp_path, save_losses=True, autoload_last_checkpoint=False)
    assert choose_checkpoint(over) is over
