"""Which checkpoint a job starts from at its chief, and an earlier run's files set aside so two
runs never mix in one model dir (workers/model_dir_runs.py). Real files and links."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from appliance._proto.v1 import common_pb2, control_pb2
from appliance.workers.checkpoints import Checkpoint, write_checkpoint
from appliance.workers.model_dir_runs import EARLIER_RUNS, set_aside, start_checkpoint
from appliance.workers.topology import JobLayout, job_layout


def _layout(model_dir: Path, mode: str = "train", **runconfig: object) -> JobLayout:
    peers = [control_pb2.Peer(name="chief-0", role="chief", index=0)]
    for role in ("cs2", "memoryx", "swarmx"):
        peers.append(control_pb2.Peer(name=f"{role}-0", role=role, index=0))
    modes = {"train": common_pb2.MODE_TRAIN, "eval": common_pb2.MODE_EVAL}
    return job_layout(
        control_pb2.Topology(
            job_id="wsjob-test", num_csx=1, num_steps=20, mode=modes[mode],
            params_yaml=yaml.safe_dump({"runconfig": runconfig}), model_dir=str(model_dir),
            peers=peers,
        )
    )  # fmt: skip


def _checkpoint(model_dir: Path, step: int) -> Path:
    weights = {0: {"weight": np.ones(2, dtype=np.float32)}}
    return write_checkpoint(model_dir, Checkpoint(step, "digest", "sgd", weights, {}))


def _earlier_run(model_dir: Path) -> None:
    model_dir.mkdir(exist_ok=True)
    for step in (5, 10):
        _checkpoint(model_dir, step)
    for name in ("weights.npz", "metrics.json", "metrics.jsonl", "events.out.tfevents.1.host"):
        (model_dir / name).write_text("earlier")
    for folder in ("train", "eval"):
        (model_dir / folder).mkdir()
        (model_dir / folder / "events.out.tfevents.1.host").write_text("earlier")


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_training_job_starts_from_the_newest_checkpoint_of_its_model_dir(
    tmp_path: Path,
) -> None:
    _earlier_run(tmp_path)
    assert start_checkpoint(_layout(tmp_path), attempt=1) == str(tmp_path / "checkpoint_10.npz")
    assert not (tmp_path / EARLIER_RUNS).exists()  # the same run, continued


def test_starting_over_sets_the_earlier_run_aside(tmp_path: Path) -> None:
    _earlier_run(tmp_path)
    layout = _layout(tmp_path, autoload_last_checkpoint=False)
    assert start_checkpoint(layout, attempt=1) == ""
    assert _names(tmp_path) == [EARLIER_RUNS]
    assert _names(tmp_path / EARLIER_RUNS / "1") == [
        "checkpoint_10.npz", "checkpoint_5.npz", "eval", "events.out.tfevents.1.host",
        "metrics.json", "metrics.jsonl", "train", "weights.npz",
    ]  # fmt: skip
    _earlier_run(tmp_path)  # and again: a second folder
    start_checkpoint(layout, attempt=1)
    assert _names(tmp_path / EARLIER_RUNS) == ["1", "2"]


def test_a_restart_keeps_its_own_files(tmp_path: Path) -> None:
    _earlier_run(tmp_path)
    layout = _layout(tmp_path, autoload_last_checkpoint=False)
    assert start_checkpoint(layout, attempt=2) == str(tmp_path / "checkpoint_10.npz")
    assert EARLIER_RUNS not in _names(tmp_path)


def test_starting_from_an_older_checkpoint_sets_the_later_ones_aside(tmp_path: Path) -> None:
    _earlier_run(tmp_path)
    older = str(tmp_path / "checkpoint_5.npz")
    assert start_checkpoint(_layout(tmp_path, checkpoint_path=older), attempt=1) == older
    assert _names(tmp_path / EARLIER_RUNS / "1") == ["checkpoint_10.npz"]


def test_starting_from_another_dirs_checkpoint_sets_this_dirs_run_aside(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    given = str(_checkpoint(elsewhere, 3))
    model_dir = tmp_path / "model"
    _earlier_run(model_dir)
    assert start_checkpoint(_layout(model_dir, checkpoint_path=given), attempt=1) == given
    assert _names(model_dir) == [EARLIER_RUNS]


def test_eval_takes_the_newest_checkpoint_and_refuses_without_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode eval evaluates a checkpoint and model_dir"):
        start_checkpoint(_layout(tmp_path, "eval"), attempt=1)
    _earlier_run(tmp_path)
    newest = str(tmp_path / "checkpoint_10.npz")
    assert start_checkpoint(_layout(tmp_path, "eval"), attempt=1) == newest
    assert EARLIER_RUNS not in _names(tmp_path)  # an evaluation moves nothing


def test_a_planted_link_is_moved_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "secret").write_text("do not touch\n")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "train").symlink_to(victim, target_is_directory=True)
    (model_dir / "metrics.json").symlink_to(victim / "secret")
    moved = set_aside(model_dir, after_step=None)
    assert moved is not None and (moved / "train").is_symlink()
    assert _names(victim) == ["secret"] and (victim / "secret").read_text() == "do not touch\n"
    (model_dir / EARLIER_RUNS / "2").symlink_to(victim, target_is_directory=True)
    (model_dir / "weights.npz").write_text("x")
    assert set_aside(model_dir, after_step=None) == model_dir / EARLIER_RUNS / "3"
    assert _names(victim) == ["secret"]  # a planted "2" is passed over, never written through
