"""A job's curves from the lines of its metrics.jsonl: points checked one by one, runs that
share a model dir, thinning."""

from __future__ import annotations

import itertools
import json

from appliance.domain.curves import (
    MAX_POINTS,
    Curves,
    EvalPoint,
    TrainPoint,
    curves_from_lines,
    thin,
)


def train(step: int, loss: float = 1.0, learning_rate: float = 0.003) -> bytes:
    return json.dumps({"step": step, "loss": loss, "learning_rate": learning_rate,
                       "samples_per_second": 10.0}).encode()  # fmt: skip


def evaluation(step: int, loss: float = 2.0, accuracy: float = 0.5) -> bytes:
    return json.dumps({"step": step, "eval_loss": loss, "eval_accuracy": accuracy}).encode()


def steps(curves: Curves) -> tuple[list[int], list[int]]:
    return [p.step for p in curves.train], [p.step for p in curves.evals]


def test_training_and_evaluation_points_in_step_order() -> None:
    curves = curves_from_lines([train(1, 2.5), train(2, 2.25), evaluation(2, 2.4, 0.25)])
    assert curves.train == (TrainPoint(1, 2.5, 0.003), TrainPoint(2, 2.25, 0.003))
    assert curves.evals == (EvalPoint(2, 2.4, 0.25),)
    assert not curves.thinned and curves.problem == ""


def test_lines_that_are_not_points_are_skipped() -> None:
    hostile = [
        b"", b"not json", b"\xff\xfe", b"[1, 2]", b'"step"', b'{"loss": 1.0}',
        b'{"step": "3", "loss": 1.0, "learning_rate": 0.1}',
        b'{"step": true, "loss": 1.0, "learning_rate": 0.1}',
        b'{"step": -1, "loss": 1.0, "learning_rate": 0.1}',
        b'{"step": 3, "loss": NaN, "learning_rate": 0.1}',
        b'{"step": 3, "loss": Infinity, "learning_rate": 0.1}',
        b'{"step": 3, "loss": 1.0, "learning_rate": "fast"}',
        b'{"step": 3, "eval_loss": 1.0}',
        b'{"step": 3, "loss": 1.0, "learning_rate": 0.1, "pad": "' + b"x" * 5_000 + b'"}',
        b'{"step": 3, "loss": 1e999, "learning_rate": 0.1}',
        b'{"step": 3, "loss": 1.0, "learning_rate": 0.1',  # a line still being written
    ]  # fmt: skip
    curves = curves_from_lines([train(1), *hostile, train(2)])
    assert steps(curves) == ([1, 2], [])


def test_a_run_resumed_from_a_checkpoint_replaces_the_old_runs_points_from_there() -> None:
    first_run = [train(s) for s in range(1, 51)] + [evaluation(25), evaluation(50)]
    resumed = [train(s, loss=0.5) for s in range(41, 61)] + [evaluation(60)]
    curves = curves_from_lines(first_run + resumed)
    trained, evaluated = steps(curves)
    assert trained == list(range(1, 61))
    assert evaluated == [25, 60]  # the evaluation at 50 was the old run's
    assert all(p.loss == 0.5 for p in curves.train if p.step > 40)


def test_a_later_run_from_step_one_leaves_nothing_of_the_earlier() -> None:
    earlier = [train(s, loss=9.0) for s in range(1, 101)] + [evaluation(100)]
    later = [train(s) for s in range(1, 11)]
    trained, evaluated = steps(curves_from_lines(earlier + later))
    assert trained == list(range(1, 11)) and evaluated == []


def test_an_evaluation_again_replaces_evaluations_only() -> None:
    """An eval job in the model dir of a finished train job: its evaluation at the
    checkpoint's step replaces the one there, the training curve stays."""
    lines = [train(s) for s in range(1, 21)] + [evaluation(20, 3.0)] + [evaluation(20, 1.5)]
    curves = curves_from_lines(lines)
    assert steps(curves) == (list(range(1, 21)), [20])
    assert curves.evals[0].loss == 1.5


def test_a_long_curve_is_thinned_evenly_keeping_its_ends() -> None:
    many = [train(s) for s in range(1, 3 * MAX_POINTS + 2)]
    curves = curves_from_lines(many)
    trained, _ = steps(curves)
    assert len(trained) == MAX_POINTS and curves.thinned
    assert trained[0] == 1 and trained[-1] == 3 * MAX_POINTS + 1
    gaps = {b - a for a, b in itertools.pairwise(trained)}
    assert gaps <= {3, 4}
    assert thin([1, 2, 3], 5) == [1, 2, 3]


def test_read_in_parts_says_it_is_thinned() -> None:
    assert curves_from_lines([train(1)], partial=True).thinned
