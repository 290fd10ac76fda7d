"""A replica never writes through a link planted in a model directory: a symlink named like its
output is replaced (the file it pointed to untouched), a file it appends to must be its own,
and a model directory that is itself a link is refused. Real files, real links."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from appliance.workers.checkpoints import Checkpoint, read_checkpoint, write_checkpoint
from appliance.workers.safe_files import UnsafePath, write_whole
from appliance.workers.summaries import SummaryLog, write_final_metrics


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Someone else's private file, the target of the planted links."""
    path = tmp_path / "elsewhere" / "secret"
    path.parent.mkdir()
    path.write_text("do not touch\n")
    path.chmod(0o600)
    return path


def _model_dir(tmp_path: Path) -> Path:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    return model_dir


def test_final_metrics_replace_a_planted_symlink(tmp_path: Path, victim: Path) -> None:
    model_dir = _model_dir(tmp_path)
    (model_dir / "metrics.json").symlink_to(victim)
    write_final_metrics(model_dir, {"loss": 0.5, "step": 10})
    assert victim.read_text() == "do not touch\n"
    assert not (model_dir / "metrics.json").is_symlink()
    assert (model_dir / "metrics.json").read_text() == '{"loss": 0.5, "step": 10}\n'
    assert sorted(p.name for p in model_dir.iterdir()) == ["metrics.json"]  # nothing left over


def test_a_checkpoint_replaces_a_planted_symlink(tmp_path: Path, victim: Path) -> None:
    model_dir = _model_dir(tmp_path)
    (model_dir / "checkpoint_5.npz").symlink_to(victim)
    weights = {0: {"w": np.ones((2, 2), dtype=np.float32)}}
    path = write_checkpoint(model_dir, Checkpoint(5, "digest", "sgd", weights, {}))
    assert victim.read_text() == "do not touch\n"
    assert read_checkpoint(path).step == 5 and not path.is_symlink()


def test_appending_through_a_symlink_or_a_hard_link_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    model_dir = _model_dir(tmp_path)
    (model_dir / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(UnsafePath, match=r"metrics\.jsonl cannot be appended to"):
        SummaryLog(model_dir)
    (model_dir / "metrics.jsonl").unlink()
    mine = tmp_path / "mine"
    mine.write_text("")
    os.link(mine, model_dir / "metrics.jsonl")
    with pytest.raises(UnsafePath, match="not a regular file of its own"):
        SummaryLog(model_dir)
    assert victim.read_text() == "do not touch\n" and mine.read_text() == ""


def test_a_model_dir_that_is_a_link_is_refused(tmp_path: Path, victim: Path) -> None:
    linked = tmp_path / "model"
    linked.symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(UnsafePath, match="is not a directory a job may use"):
        write_final_metrics(linked, {"step": 1})
    assert sorted(p.name for p in victim.parent.iterdir()) == ["secret"]


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path: Path) -> None:
    model_dir = _model_dir(tmp_path)
    (model_dir / "weights.npz").write_bytes(b"old")

    def fail(file: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_whole(model_dir / "weights.npz", fail)
    assert (model_dir / "weights.npz").read_bytes() == b"old"
    assert sorted(p.name for p in model_dir.iterdir()) == ["weights.npz"]


def test_a_link_anywhere_on_the_way_to_the_model_dir_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    """A link swapped in above the model dir after the coordinator checked the path."""
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "alice").symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(UnsafePath, match="symbolic link on the way"):
        write_final_metrics(tmp_path / "users" / "alice" / "job", {"step": 1})
    assert sorted(p.name for p in victim.parent.iterdir()) == ["secret"]


def test_a_checkpoint_is_not_read_through_a_link(tmp_path: Path, victim: Path) -> None:
    mine = _model_dir(tmp_path)
    weights = {0: {"weight": np.ones(2, dtype=np.float32)}}
    path = write_checkpoint(mine, Checkpoint(5, "digest", "sgd", weights, {}))
    (tmp_path / "via").symlink_to(mine, target_is_directory=True)
    assert read_checkpoint(path).step == 5
    with pytest.raises(ValueError, match="cannot be read"):
        read_checkpoint(tmp_path / "via" / path.name)
    (tmp_path / "link.npz").symlink_to(path)
    with pytest.raises(ValueError, match="cannot be read"):
        read_checkpoint(tmp_path / "link.npz")


def test_the_event_file_is_not_written_through_a_link_waiting_for_its_name(
    tmp_path: Path, victim: Path
) -> None:
    """tensorboardX names its file events.out.tfevents.<seconds>.<host>: guessable ahead."""
    model_dir = _model_dir(tmp_path)
    (model_dir / "train").mkdir()
    now = int(time.time())
    for second in range(now - 2, now + 30):
        name = f"events.out.tfevents.{second}.{socket.gethostname()}"
        (model_dir / "train" / name).symlink_to(victim)
    log = SummaryLog(model_dir)
    log.record(1, {"loss": 1.0})
    log.close()
    assert victim.read_text() == "do not touch\n"
    (events,) = [p for p in (model_dir / "train").glob("events.*") if not p.is_symlink()]
    assert len(events.name.rsplit(".", 1)[-1]) == 16  # a suffix no one can guess ahead


def test_a_fifo_planted_as_the_checkpoint_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = _model_dir(tmp_path) / "checkpoint_5.npz"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file"):
        read_checkpoint(fifo)  # with a plain open this would wait for a writer for ever


def test_a_fifo_planted_as_metrics_jsonl_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Opening a FIFO to write waits for a reader: the job sat RUNNING at step 0 for ever."""
    model_dir = _model_dir(tmp_path)
    os.mkfifo(model_dir / "metrics.jsonl")
    with pytest.raises(UnsafePath, match=r"cannot be appended to|not a regular file"):
        SummaryLog(model_dir)
