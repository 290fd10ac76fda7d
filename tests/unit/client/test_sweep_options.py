"""The launcher's `--sweep KEY=V1,V2` options as submit's `sweep`: a key given in two options
is refused naming `sweep` (the second would silently replace the first's values)."""

from __future__ import annotations

import pytest

from appliance.client.launch_options import sweep_of
from appliance.domain.errors import InvalidSpec


def test_each_option_is_one_axis() -> None:
    assert sweep_of(["optimizer.learning_rate=1e-3,3e-3", "train_input.batch_size=64"]) == {
        "sweep": {"optimizer.learning_rate": "1e-3,3e-3", "train_input.batch_size": "64"}
    }
    assert sweep_of([]) == {}  # none given: the submit has no sweep argument


def test_a_key_given_twice_is_refused_not_replaced() -> None:
    with pytest.raises(InvalidSpec) as refused:
        sweep_of(["optimizer.learning_rate=1e-3", "optimizer.learning_rate=2e-3"])
    assert refused.value.field == "sweep" and "twice" in refused.value.message
