"""Queue definitions, quotas on a pool, the queues file, dependencies and the fair-share
formula: the pure rules (domain/queues.py, dependencies.py, fair_share.py)."""

from __future__ import annotations

import math

import pytest

from appliance.domain.dependencies import Condition, Dependency, parse_dependencies
from appliance.domain.errors import InvalidSpec
from appliance.domain.fair_share import Usage, held, weighted_share
from appliance.domain.phases import Phase
from appliance.domain.queues import (
    DEFAULT_QUEUE,
    USER_CAPS,
    Quota,
    lent_systems,
    parse_queues_document,
    parse_size,
    resolve_quotas,
    validate_queue,
)

GIB = 1 << 30
JOB = "wsjob-0123456789abcd"


def test_the_default_queue_owns_what_no_other_quota_holds() -> None:
    assert resolve_quotas([], 4, 64 * GIB) == {DEFAULT_QUEUE: Quota(4, 64 * GIB)}
    quotas = resolve_quotas(
        [
            validate_queue(name="nlp", systems=1),
            validate_queue(name="vision", systems=2, memoryx="8GiB"),
        ],
        4,
        64 * GIB,
    )
    # nlp's MemoryX goes with its systems (1 of 4: 16 GiB); vision asked for 8 GiB.
    assert (quotas["nlp"].systems, quotas["nlp"].memoryx_bytes) == (1, 16 * GIB)
    assert (quotas["vision"].systems, quotas["vision"].memoryx_bytes) == (2, 8 * GIB)
    assert (quotas["default"].systems, quotas["default"].memoryx_bytes) == (1, 40 * GIB)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "NLP"}, "queue"),
        ({"name": "a" * 64}, "queue"),
        ({"name": "nlp", "systems": -1}, "systems"),
        ({"name": "nlp", "systems": True}, "systems"),
        ({"name": "nlp", "systems": "two"}, "systems"),
        ({"name": "nlp", "systems": 2**21}, "systems"),
        ({"name": "nlp", "borrow_systems": "²"}, "borrow_systems"),
        ({"name": "nlp", "memoryx": True}, "memoryx"),
        ({"name": "nlp", "weight": 0}, "weight"),
        ({"name": "nlp", "weight": math.nan}, "weight"),
        ({"name": "nlp", "weight": "heavy"}, "weight"),
        ({"name": "nlp", "memoryx": "lots"}, "memoryx"),
        ({"name": "nlp", "memoryx": -5}, "memoryx"),
        ({"name": "nlp", "borrow_memoryx": "1" * 40}, "borrow_memoryx"),
        ({"name": "nlp", "lend": "yes"}, "lend"),
        ({"name": "nlp", "groups": ["ok", "no\u202eway"]}, "groups"),
        ({"name": "nlp", "weight": 1e-320}, "weight"),
        ({"name": "default", "systems": 2}, "systems"),
    ],
)
def test_a_bad_queue_field_is_refused_naming_it(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        validate_queue(**fields)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_quotas_over_the_pool_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="add up to 5 systems; the pool has 4"):
        resolve_quotas(
            [validate_queue(name="a", systems=3), validate_queue(name="b", systems=2)], 4, GIB
        )
    with pytest.raises(InvalidSpec, match="of MemoryX"):
        resolve_quotas([validate_queue(name="a", systems=1, memoryx="2GiB")], 4, GIB)


def test_sizes() -> None:
    assert parse_size("32GiB", "m") == 32 * GIB
    assert parse_size("512Mi", "m") == 512 << 20
    assert parse_size("2G", "m") == 2 * 10**9
    assert parse_size(7, "m") == 7
    assert parse_size(None, "m") is None


def test_the_queues_file_names_the_entry_and_field_at_fault() -> None:
    good = parse_queues_document({"queues": [{"name": "nlp", "systems": 2, "groups": ["nlp"]}]})
    assert [(q.name, q.systems, q.groups) for q in good] == [("nlp", 2, ("nlp",))]
    with pytest.raises(InvalidSpec) as caught:
        parse_queues_document({"queues": [{"name": "nlp"}, {"name": "cv", "sytems": 2}]})
    assert caught.value.field == "queues[1].sytems"
    with pytest.raises(InvalidSpec, match="named twice: nlp"):
        parse_queues_document({"queues": [{"name": "nlp"}, {"name": "nlp"}]})
    with pytest.raises(InvalidSpec, match="one key, queues"):
        parse_queues_document(["nlp"])


def test_lent_systems_split_what_is_borrowed_over_the_idle_lenders() -> None:
    quotas = {"default": Quota(0, 0), "nlp": Quota(2, 0), "vision": Quota(2, 0)}
    assert lent_systems(quotas, {"nlp": 4}) == {"default": 0, "nlp": 0, "vision": 2}
    assert lent_systems(quotas, {"nlp": 2}) == {"default": 0, "nlp": 0, "vision": 0}
    three = quotas | {"cv": Quota(2, 0)}
    lent = lent_systems(three, {"nlp": 3})  # 1 borrowed, vision and cv each have 2 idle
    assert sum(lent.values()) == 1
    # vision stopped lending while nlp borrowed 2: default (idle 1) cannot have lent more.
    private = quotas | {"default": Quota(1, 0), "vision": Quota(2, 0, lend=False)}
    assert lent_systems(private, {"nlp": 4})["default"] == 1


def test_dependencies_parse_with_afterok_as_the_default() -> None:
    parsed = parse_dependencies([JOB, f"afternotok:{JOB[:-1]}e"])
    assert parsed == (Dependency(JOB), Dependency(JOB[:-1] + "e", Condition.AFTERNOTOK))
    other = JOB[:-1] + "f"
    slurm = parse_dependencies([f"afterany:{JOB}:{other}"])  # one condition, several jobs
    assert slurm == (Dependency(JOB, Condition.AFTERANY), Dependency(other, Condition.AFTERANY))
    assert parse_dependencies(f"{JOB},afternotok:{other}") == (
        Dependency(JOB), Dependency(other, Condition.AFTERNOTOK),
    )  # fmt: skip
    for bad in (["afterwards:" + JOB], ["wsjob-"], [JOB, JOB], [JOB] * 65, [42], [":" + JOB]):
        with pytest.raises(InvalidSpec) as caught:
            parse_dependencies(bad)
        assert caught.value.field == "depends_on"


@pytest.mark.parametrize(
    ("condition", "met", "broken"),
    [
        (Condition.AFTEROK, {Phase.SUCCEEDED}, {Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT}),
        (
            Condition.AFTERANY,
            {Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT},
            set(),
        ),
        (Condition.AFTERNOTOK, {Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT}, {Phase.SUCCEEDED}),
    ],
)
def test_a_dependency_is_met_broken_or_waiting(
    condition: Condition, met: set[Phase], broken: set[Phase]
) -> None:
    for phase in Phase:
        assert condition.met_by(phase) == (phase in met)
        assert condition.broken_by(phase) == (phase in broken)


def test_usage_halves_each_half_life_and_is_shared_out_by_weight() -> None:
    hour = 3600.0
    # 2 systems for an hour, seen at its end with a very long half-life: ~7200 system-seconds.
    fresh = held(2, 0, 0.0, hour, hour, half_life=1e12)
    assert fresh.system_seconds == pytest.approx(2 * hour, rel=1e-6)
    # The same, one half-life later, counts half.
    assert held(2, 0, 0.0, hour, hour + 1e6, half_life=1e6).system_seconds == pytest.approx(
        held(2, 0, 0.0, hour, hour, half_life=1e6).system_seconds / 2
    )
    stored = Usage(100.0, 0.0, as_of=0.0)
    assert stored.at(10.0, half_life=10.0).system_seconds == pytest.approx(50.0)
    # The dominant resource over the weight: MemoryX dominates here.
    usage = Usage(system_seconds=4.0, memoryx_byte_seconds=30.0 * GIB)
    assert weighted_share(usage, 4, 16 * GIB, weight=2.0) == pytest.approx((30 / 16) / 2)


def test_unlimited_borrowing_and_group_names_as_tokens_carry_them() -> None:
    spec = validate_queue(name="nlp", borrow_systems="unlimited", groups=["ml team", "Ünï"])
    assert spec.borrow_systems is None and spec.groups == ("ml team", "Ünï")
    assert validate_queue(name="nlp", borrow_systems="3").borrow_systems == 3
    assert validate_queue(name="nlp", groups=None).groups == ()


def test_a_queues_caps_per_user_are_whole_numbers_or_unlimited() -> None:
    """#37: max_running_jobs_per_user, max_queued_jobs_per_user, max_systems_per_user."""
    spec = validate_queue(
        name="nlp", max_running_jobs_per_user=2, max_queued_jobs_per_user="10",
        max_systems_per_user="unlimited",
    )  # fmt: skip
    assert (spec.max_running_jobs_per_user, spec.max_queued_jobs_per_user) == (2, 10)
    assert spec.max_systems_per_user is None
    for field in USER_CAPS:
        for bad in (-1, "lots", True, 2.5, 10**7):
            with pytest.raises(InvalidSpec, match=f"{field} must be a whole number") as raised:
                validate_queue(name="nlp", **{field: bad})
            assert raised.value.field == field
    [parsed] = parse_queues_document(
        {"queues": [{"name": "nlp", "systems": 1, "max_systems_per_user": 1}]}
    )
    assert parsed.max_systems_per_user == 1
