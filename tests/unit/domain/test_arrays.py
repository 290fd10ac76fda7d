"""Array and sweep syntax (domain/arrays.py): Slurm's forms, bounds checked before anything is
expanded, hostile inputs refused naming the field, the grid and each task's params."""

from __future__ import annotations

import time

import pytest

from appliance.domain.arrays import (
    MAX_ARRAY_TASKS,
    ArrayTask,
    array_of,
    array_tasks,
    collapsed_indices,
    parse_array,
    task_id,
    task_params,
)
from appliance.domain.errors import InvalidSpec
from appliance.domain.ids import is_job_id


@pytest.mark.parametrize(
    ("text", "indices", "cap"),
    [
        ("0-3", (0, 1, 2, 3), 0),
        ("0-31%4", tuple(range(32)), 4),
        ("1,3,7", (1, 3, 7), 0),
        ("0-15:4", (0, 4, 8, 12), 0),
        ("7, 1-2 ,0-6:3%2", (0, 1, 2, 3, 6, 7), 2),
        ("5", (5,), 0),
        ("%3", (), 3),
    ],
)
def test_slurm_forms(text: str, indices: tuple[int, ...], cap: int) -> None:
    request = parse_array(text)
    assert request.indices == indices and request.cap == cap


@pytest.mark.parametrize(
    "text",
    [
        "0-1000000",  # an index over the bound
        "0-99999",  # within the index bound, too many tasks
        "0-" + "9" * 5000,  # too long
        "9" * 200,  # a number of 200 digits: bounded before int() reads it
        ",".join(["0-999"] * 2),  # counted across parts
        "",
        "3-1",
        "0-10:0",
        "1:2",
        "-1",
        "a-b",
        "0-3%0",
        "0-3%5000",
        "0x10",
        "1,,2",
        "\u0661",  # an Arabic-Indic digit: int() would take it
        "0-3%4%5",
    ],
)
def test_refused_naming_array(text: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_array(text)
    assert caught.value.field == "array"
    assert "\n" not in caught.value.message and len(caught.value.message) < 200


def test_a_huge_range_is_refused_without_expanding_it() -> None:
    started = time.perf_counter()
    for _ in range(100):
        with pytest.raises(InvalidSpec):
            parse_array("0-99999:1,0-99999:1%1")
    assert time.perf_counter() - started < 0.5


def test_the_grid_is_the_product_in_key_order() -> None:
    tasks, cap = array_tasks(
        "%2", {"train_input.batch_size": "64,128", "optimizer.learning_rate": "1e-3,3e-3,1e-2"}
    )
    assert cap == 2 and [t.index for t in tasks] == list(range(6))
    assert tasks[0].overrides == {
        "optimizer.learning_rate": "1e-3",
        "train_input.batch_size": "64",
    }
    assert tasks[1].overrides["train_input.batch_size"] == "128"
    assert tasks[5].overrides == {
        "optimizer.learning_rate": "1e-2",
        "train_input.batch_size": "128",
    }


@pytest.mark.parametrize(
    ("array", "sweep"),
    [
        ("", {"optimizer.learning_rate": ",".join(str(i) for i in range(10_000))}),
        ("", {f"model.k{i}": "1,2,3,4,5,6,7,8,9,10" for i in range(4)}),  # 10,000 points
        ("", {"learning_rate": "1,2"}),  # no section
        ("", {"optimizer.learning_rate": ""}),
        ("", {"optimizer.learning_rate": "1,,2"}),
        ("", {"optimizer.learning_rate": "1,1"}),
        ("", {"x." * 100 + "y": "1"}),
        ("0-3", {"optimizer.learning_rate": "1,2"}),  # indices and a grid
        ("%2", {}),  # a sweep's cap with no sweep: no task at all (it crashed the submit)
    ],
)
def test_bad_sweeps_are_refused(array: str, sweep: dict[str, str]) -> None:
    with pytest.raises(InvalidSpec) as caught:
        array_tasks(array, sweep)
    assert caught.value.field in ("sweep", "array")


def test_task_params_apply_overrides_and_the_index() -> None:
    params = {
        "model": {"name": "fc_mnist", "seed": "${array_task_id}"},
        "runconfig": {"tag": "run-${array_task_id}"},
    }
    task = ArrayTask(7, {"optimizer.learning_rate": "1e-3", "model.hidden.size": "64"})
    out = task_params(params, task)
    assert out["model"]["seed"] == 7 and out["runconfig"]["tag"] == "run-7"
    assert out["optimizer"]["learning_rate"] == 0.001
    assert out["model"]["hidden"]["size"] == 64
    assert params["model"]["seed"] == "${array_task_id}"  # the original is not changed


def test_task_ids() -> None:
    array = "wsjob-0a1b2c3d4e5f6g"
    assert task_id(array, 7) == "wsjob-0a1b2c3d4e5f6g_7" and is_job_id(task_id(array, 7))
    assert array_of("wsjob-0a1b2c3d4e5f6g_7") == (array, 7)
    assert array_of(array) is None
    assert not is_job_id(array + "_123456") and not is_job_id(array + "_")
    assert collapsed_indices([3, 0, 1, 2, 7, 9, 10]) == "[0-3,7,9-10]"


def test_plain_array_tasks() -> None:
    tasks, cap = array_tasks("0-2%1", {})
    assert [t.index for t in tasks] == [0, 1, 2] and cap == 1
    assert array_tasks("", {}) == ((), 0)
    assert len(array_tasks(f"0-{MAX_ARRAY_TASKS - 1}", {})[0]) == MAX_ARRAY_TASKS


def test_listings_collapse_an_arrays_queued_tasks_as_squeue_does() -> None:
    from appliance.domain.array_view import collapse_queued

    rows = [("a", 0, "RUNNING"), ("a", 1, "QUEUED"), ("x", -1, "QUEUED"), ("a", 2, "QUEUED"),
            ("a", 4, "QUEUED"), ("b", 0, "QUEUED")]  # fmt: skip

    def queued_task(row: tuple[str, int, str]) -> tuple[str, int, int] | None:
        return (row[0], row[1], 4) if row[1] >= 0 and row[2] == "QUEUED" else None

    shown = collapse_queued(rows, queued_task, lambda row, name: (name, row[1], row[2]))
    assert [r[0] for r in shown] == ["a", "a_[1-2,4%4]", "x", "b"]


@pytest.mark.parametrize("cap", ["%0", "%-1", "%", "%x", "%1001", "%9999999"])
def test_every_bad_cap_gets_the_one_sentence_with_its_range(cap: str) -> None:
    with pytest.raises(InvalidSpec, match="cap after % must be a whole number from 1 to 1000"):
        parse_array(f"0-3{cap}")


def test_an_index_too_long_to_show_says_it_was_cut() -> None:
    with pytest.raises(InvalidSpec, match=r"'9999999999999999'\.\.\. \(20 characters\)"):
        parse_array("0-99999999999999999999")
