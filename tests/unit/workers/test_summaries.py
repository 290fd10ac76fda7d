"""TensorBoard's files where the Model Zoo puts them ({model_dir}/train/ and eval/), read back
with TensorBoard's own reader; a resumed run drops what an earlier run recorded past its start
(TensorBoard's purge marker, and the same lines of metrics.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appliance.workers.summaries import DEFAULT_LOG_POINTS, SummaryLog, log_interval


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the event files in `folder`, as TensorBoard shows it."""
    reader = EventAccumulator(str(folder))
    reader.Reload()
    return {
        tag: [(e.step, round(e.value, 6)) for e in reader.Scalars(tag)]
        for tag in reader.Tags()["scalars"]
    }


def _train(log: SummaryLog, steps: range, offset: float) -> None:
    for step in steps:
        log.record(
            step,
            {"loss": offset + step, "learning_rate": 0.5, "samples_per_second": 10.0},
        )


def test_training_goes_to_train_and_evaluation_to_eval(tmp_path: Path) -> None:
    log = SummaryLog(tmp_path, resumed_at=0)
    _train(log, range(1, 4), 0.0)
    log.record(3, {"eval_loss": 2.5, "eval_accuracy": 0.75})
    log.close()

    train = scalars(tmp_path / "train")
    assert train["loss"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert set(train) == {"loss", "learning_rate", "samples_per_second"}
    assert scalars(tmp_path / "eval") == {"loss": [(3, 2.5)], "eval/accuracy": [(3, 0.75)]}
    assert not list(tmp_path.glob("events.out.tfevents.*"))  # nothing at the top any more
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1] == {"step": 3, "eval_loss": 2.5, "eval_accuracy": 0.75}


def test_a_resumed_run_drops_what_an_earlier_run_recorded_past_its_start(
    tmp_path: Path,
) -> None:
    first = SummaryLog(tmp_path, resumed_at=0)
    _train(first, range(1, 11), 0.0)  # ran to step 10; its newest checkpoint is step 5
    first.record(8, {"eval_loss": 9.0, "eval_accuracy": 0.1})
    first.close()
    second = SummaryLog(tmp_path, resumed_at=5)
    _train(second, range(6, 8), 100.0)
    second.close()

    train = scalars(tmp_path / "train")
    assert train["loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0),
                             (6, 106.0), (7, 107.0)]  # fmt: skip
    assert not any(scalars(tmp_path / "eval").values())  # step 8's evaluation is gone too
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["step"], x["loss"]) for x in lines] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 106.0), (7, 107.0),
    ]  # fmt: skip


def test_an_evaluation_of_a_checkpoint_drops_nothing(tmp_path: Path) -> None:
    first = SummaryLog(tmp_path, resumed_at=0)
    _train(first, range(1, 5), 0.0)
    first.close()
    evaluation = SummaryLog(tmp_path, resumed_at=None)
    evaluation.record(2, {"eval_loss": 1.5, "eval_accuracy": 0.5})
    evaluation.close()
    assert [s for s, _ in scalars(tmp_path / "train")["loss"]] == [1, 2, 3, 4]
    assert scalars(tmp_path / "eval")["loss"] == [(2, 1.5)]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 5


def test_lines_too_long_or_not_ours_are_handled_when_dropping(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 1.0}\nnot json\n' + "x" * 200_000 + '\n{"step": 9, "loss": 9}\n'
        '{"step": 2, "loss": 2.0}\n{"step": 3, "lo'
    )
    SummaryLog(tmp_path, resumed_at=2).close()
    assert (tmp_path / "metrics.jsonl").read_text() == (
        '{"step": 1, "loss": 1.0}\nnot json\n{"step": 2, "loss": 2.0}\n'
    )


def test_without_log_steps_a_run_gets_about_a_hundred_points() -> None:
    assert log_interval(None, 4) == 1  # a short run: every step
    assert log_interval(None, DEFAULT_LOG_POINTS) == 1
    assert log_interval(None, 1000) == 10
    assert log_interval(None, 1001) == 11
    assert log_interval(7, 1000) == 7


def test_each_metrics_line_names_the_job_that_wrote_it(tmp_path: Path) -> None:
    """A model dir outlives its jobs: the dashboard tells one job's points from a later's."""
    log = SummaryLog(tmp_path, resumed_at=0, job="wsjob-a")
    log.record(1, {"loss": 2.0, "learning_rate": 0.1})
    log.close()
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line) == {"step": 1, "loss": 2.0, "learning_rate": 0.1, "job": "wsjob-a"}
