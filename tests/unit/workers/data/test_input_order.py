"""The order of the samples: epochs follow one another, each a permutation drawn from (seed,
epoch) when shuffled; drop_last drops an epoch's partial batch, else it is short; num_examples
keeps the first samples; a data set making no batch is refused."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.domain.params import parse_params
from appliance.workers.data.dataset import DataError
from appliance.workers.data.order import MAX_SAMPLES, InputOrder, InputPosition, input_order


def _all(order: InputOrder, epochs: int) -> list[list[int]]:
    steps = range(order.batches_per_epoch * epochs)
    return [order.batch(step)[0].tolist() for step in steps]


def test_unshuffled_batches_run_through_the_epoch_then_start_over() -> None:
    order = InputOrder(10, 4, shuffle=False, seed=0, drop_last=True)
    assert order.batches_per_epoch == 2
    assert _all(order, 2) == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7]]
    assert order.batch(3)[1] == InputPosition(epoch=1, offset=4)


def test_without_drop_last_the_epochs_last_batch_is_short() -> None:
    order = InputOrder(10, 4, shuffle=False, seed=0, drop_last=False)
    assert order.batches_per_epoch == 3
    assert _all(order, 2)[2:4] == [[8, 9], [0, 1, 2, 3]]
    assert InputOrder(8, 4, shuffle=False, seed=0, drop_last=False).batches_per_epoch == 2


def test_a_shuffled_epoch_is_the_permutation_of_seed_and_epoch() -> None:
    order = InputOrder(10, 5, shuffle=True, seed=7, drop_last=True)
    for epoch in (0, 1, 5):
        expected = np.random.default_rng([7, epoch]).permutation(10)
        got = np.concatenate([order.batch(epoch * 2 + k)[0] for k in range(2)])
        assert got.tolist() == expected.tolist()
        assert got.dtype == np.int64
    assert order.batch(0)[0].tolist() != order.batch(2)[0].tolist()  # each epoch its own
    again = InputOrder(10, 5, shuffle=True, seed=7, drop_last=True)
    assert again.batch(11)[0].tolist() == order.batch(11)[0].tolist()  # pure: any order


def test_a_data_set_that_makes_no_batch_is_refused() -> None:
    with pytest.raises(DataError, match=r"fewer than one batch"):
        InputOrder(3, 4, shuffle=False, seed=0, drop_last=True)
    with pytest.raises(DataError, match=r"no samples"):
        InputOrder(0, 4, shuffle=False, seed=0, drop_last=False)
    short = InputOrder(3, 4, shuffle=False, seed=0, drop_last=False)
    assert _all(short, 2) == [[0, 1, 2], [0, 1, 2]]


def test_input_order_fills_the_defaults_from_the_section_and_the_runconfig() -> None:
    params = parse_params(
        {
            "model": {"name": "fc_mnist"},
            "train_input": {"batch_size": 4, "data_dir": "/data"},
            "eval_input": {"batch_size": 4, "data_dir": "/data"},
            "runconfig": {"seed": 3},
        }
    )
    train = input_order(params.train_input, params, 12)
    assert (train.shuffle, train.seed, train.drop_last) == (True, 3, True)
    evaluation = input_order(params.eval_input, params, 12)
    assert (evaluation.shuffle, evaluation.seed) == (False, 3)
    assert input_order(params.eval_input, params, 12, training=True).shuffle


def test_input_order_keeps_the_first_num_examples_and_the_given_seed() -> None:
    params = parse_params(
        {
            "model": {"name": "fc_mnist"},
            "train_input": {
                "batch_size": 2,
                "num_examples": 6,
                "shuffle_seed": 11,
                "shuffle": False,
                "drop_last_batch": False,
            },
        }
    )
    order = input_order(params.train_input, params, 100)
    assert (order.num_samples, order.seed, order.shuffle, order.drop_last) == (6, 11, False, False)
    assert input_order(params.train_input, params, 4).num_samples == 4  # fewer: all of them


def test_a_data_set_too_large_to_order_is_refused_before_its_order_is_drawn() -> None:
    # An epoch's order is an int64 array of every sample: 2**40 samples (a header can claim
    # them) would be 8 TiB, drawn at the first batch; the worker node ran out of memory.
    with pytest.raises(DataError, match=r"the data set in /d holds 1099511627776 samples, more"):
        InputOrder(1 << 40, 8, shuffle=True, seed=0, drop_last=True, name="the data set in /d")
    with pytest.raises(DataError, match=r"num_examples"):
        InputOrder(MAX_SAMPLES + 1, 8, shuffle=False, seed=0, drop_last=True)
    assert InputOrder(MAX_SAMPLES, 8, shuffle=False, seed=0, drop_last=True).batches_per_epoch


def test_num_examples_bounds_a_data_set_too_large_to_order() -> None:
    params = parse_params({
        "model": {"name": "fc_mnist"},
        "train_input": {"data_dir": "/d", "batch_size": 4, "num_examples": 100},
    })  # fmt: skip
    assert input_order(params.train_input, params, 1 << 40).num_samples == 100
