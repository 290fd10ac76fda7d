"""Elastic jobs in the domain: `--num_csx 2-8` parsed and bounded, refusals naming the field,
and the plan of every size of the range (domain/elastic.py, domain/plan.py)."""

from __future__ import annotations

import pytest

from appliance.domain.elastic import parse_csx_range, size_text
from appliance.domain.errors import InsufficientCapacity, InvalidSpec
from appliance.domain.inventory import default_pool
from appliance.domain.plan import Role, plan_replicas
from appliance.domain.spec import validate_spec
from appliance.store.rows import plan_from_json, plan_to_json
from tests.model_specs import FC, with_

PIPELINED = with_(FC, runconfig={"execution_strategy": "pipeline"})


@pytest.mark.parametrize(
    ("given", "parsed"),
    [("8", (8, 0)), (8, (8, 0)), ("2-8", (8, 2)), (" 2 - 8 ", (8, 2)), ("4-4", (4, 0))],
)
def test_a_size_or_a_range_parses_to_num_csx_and_num_csx_min(
    given: str | int, parsed: tuple[int, int]
) -> None:
    assert parse_csx_range(given) == parsed


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ("0-0", "num_csx"),
        ("0-4", "num_csx"),
        ("8-2", "num_csx_min"),
        ("2-", "num_csx"),
        ("-3", "num_csx"),
        ("2..8", "num_csx"),
        ("1" * 17, "num_csx"),  # bounded before it is parsed
        ("1234567-2", "num_csx"),
        (True, "num_csx"),
    ],
)
def test_a_bad_range_is_refused_naming_its_field(given: str, field: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_csx_range(given)
    assert refused.value.field == field
    assert "\n" not in refused.value.message


@pytest.mark.parametrize(
    ("num_csx", "num_csx_min", "field"),
    [(0, 0, "num_csx"), (4, 5, "num_csx_min"), (4, -1, "num_csx_min"), (4, True, "num_csx_min")],
)
def test_the_spec_refuses_a_range_out_of_order(num_csx: int, num_csx_min: int, field: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        validate_spec(params_yaml=FC, num_csx=num_csx, num_steps=1, num_csx_min=num_csx_min)
    assert refused.value.field == field


def test_a_range_of_one_size_is_a_fixed_size() -> None:
    spec = validate_spec(params_yaml=FC, num_csx=4, num_steps=1, num_csx_min=4)
    assert spec.num_csx_min == 0


def test_an_elastic_plan_is_its_smallest_with_every_larger_size_largest_first() -> None:
    spec = validate_spec(params_yaml=FC, num_csx=8, num_steps=1, num_csx_min=2)
    plan = plan_replicas(spec, default_pool(systems=8))
    assert plan.systems == 2
    assert [p.systems for p in plan.sizes()] == [8, 7, 6, 5, 4, 3, 2]
    assert plan.of_size(5).group(Role.CS2).count == 5
    assert plan.of_size(8).group(Role.SWARMX).count == 2  # fan-out of 4 ports per SwarmX
    assert plan.of_size(99) is plan
    assert plan_from_json(plan_to_json(plan)) == plan  # the store's column keeps every size
    fixed = plan_replicas(validate_spec(params_yaml=FC, num_csx=2, num_steps=1), default_pool())
    assert fixed.larger == () and "larger" not in plan_to_json(fixed)


def test_a_range_over_the_cluster_is_refused_naming_num_csx() -> None:
    spec = validate_spec(params_yaml=FC, num_csx=9, num_steps=1, num_csx_min=2)
    with pytest.raises(InsufficientCapacity) as refused:
        plan_replicas(spec, default_pool(systems=8))
    assert refused.value.field == "num_csx"


def test_a_pipelined_job_may_not_be_elastic() -> None:
    spec = validate_spec(params_yaml=PIPELINED, num_csx=2, num_steps=1, num_csx_min=1)
    with pytest.raises(InvalidSpec) as refused:
        plan_replicas(spec, default_pool())
    assert refused.value.field == "num_csx_min"


def test_the_size_shows_now_and_the_range() -> None:
    assert size_text(4, 8, 2) == "4 (2-8)"
    assert size_text(0, 8, 2) == "- (2-8)"
    assert size_text(8, 8, 0) == "8"
