"""A compile report says how many parameters a model has, as people say it."""

from __future__ import annotations

import pytest

from appliance.domain.compile import compile_job, count_in_words
from appliance.domain.inventory import default_pool
from appliance.domain.spec import validate_spec


@pytest.mark.parametrize(
    ("count", "said"),
    [(987, "987"), (269_322, "269.3 K"), (124_439_808, "124.4 M"),
     (1_315_575_808, "1.32 B"), (175_000_000_000, "175.00 B")],
)  # fmt: skip
def test_a_count_reads_as_people_say_it(count: int, said: str) -> None:
    assert count_in_words(count) == said


def test_a_report_counts_every_layers_parameters_not_only_the_listed() -> None:
    spec = validate_spec(
        params_yaml={"model": {"name": "fc_mnist", "hidden_sizes": [2] * 1500}},
        num_csx=1, num_steps=1,
    )  # fmt: skip
    report = compile_job(spec, default_pool())
    assert report.parameter_count == 784 * 2 + 2 + 1499 * (2 * 2 + 2) + 2 * 10 + 10
