"""Time limits as Slurm writes them, and the TIMEOUT phase's place in the state machine and
in dependencies."""

from __future__ import annotations

import pytest

from appliance.domain.dependencies import Condition
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import TERMINAL, Phase, can_transition
from appliance.domain.queues import parse_queues_document, validate_queue
from appliance.domain.spec import validate_spec
from appliance.domain.time_limits import (
    MAX_TIME_LIMIT_SECONDS,
    format_time_limit,
    limit_in_queue,
    parse_time_limit,
)

PARAMS = "model:\n  name: fc_mnist\n"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),  # MM
        ("90:30", 90 * 60 + 30),  # MM:SS
        ("2:00:00", 7200),  # HH:MM:SS
        ("1-12", 36 * 3600),  # D-HH
        ("1-00:30", 86400 + 1800),  # D-HH:MM
        ("2-01:02:03", 2 * 86400 + 3723),  # D-HH:MM:SS
        (" 5 ", 300),
        ("365-00:00:00", MAX_TIME_LIMIT_SECONDS),
    ],
)
def test_slurms_formats(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["-5", "0", "0:00", "abc", "", "1:2:3:4", "365-00:00:01", "1" * 40, "\uff11\uff10", "5m", 5],
)
def test_anything_else_is_refused_naming_the_field(text: object) -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_time_limit(text)
    assert refused.value.field == "time_limit"
    assert len(refused.value.message.splitlines()) == 1 and len(refused.value.message) < 200


def test_a_spec_keeps_its_limit_as_slurm_shows_it() -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, time_limit="90")
    assert (spec.time_limit, spec.time_limit_seconds) == ("01:30:00", 5400)
    plain = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1)
    assert (plain.time_limit, plain.time_limit_seconds) == ("", None)
    with pytest.raises(InvalidSpec, match="time_limit"):
        validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, time_limit="-5")
    assert format_time_limit(None) == "unlimited"
    assert format_time_limit(86400 + 61) == "1-00:01:01"


def test_a_queues_limits() -> None:
    queue = validate_queue(name="nlp", default_time_limit="1:00:00", max_time_limit=86400)
    assert (queue.default_time_limit, queue.max_time_limit) == (3600, 86400)
    unlimited = validate_queue(name="nlp", max_time_limit="unlimited")
    assert unlimited.max_time_limit is None
    (filed,) = parse_queues_document({"queues": [{"name": "a", "max_time_limit": "2-00"}]})
    assert filed.max_time_limit == 2 * 86400
    with pytest.raises(InvalidSpec) as refused:
        parse_queues_document({"queues": [{"name": "a", "max_time_limit": "x"}]})
    assert refused.value.field == "queues[0].max_time_limit"
    assert limit_in_queue(None, "a", None, None) is None
    assert limit_in_queue(None, "a", 60, 120) == 60
    assert limit_in_queue(None, "a", None, 120) == 120
    with pytest.raises(InvalidSpec, match="over queue a's maximum of 00:02:00") as refused:
        limit_in_queue(121, "a", None, 120)
    assert refused.value.field == "time_limit"


def test_timeout_is_terminal_reached_from_the_holding_phases_and_not_ok() -> None:
    assert Phase.TIMEOUT in TERMINAL and Phase.TIMEOUT.terminal
    for source in (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING):
        assert can_transition(source, Phase.TIMEOUT)
    assert not can_transition(Phase.QUEUED, Phase.TIMEOUT)
    assert not can_transition(Phase.TIMEOUT, Phase.QUEUED)
    assert not Condition.AFTEROK.met_by(Phase.TIMEOUT)
    assert Condition.AFTEROK.broken_by(Phase.TIMEOUT)
    assert Condition.AFTERNOTOK.met_by(Phase.TIMEOUT)
    assert Condition.AFTERANY.met_by(Phase.TIMEOUT)


def test_too_many_days_is_out_of_range_not_a_bad_format() -> None:
    with pytest.raises(InvalidSpec, match="from 1 second to 365 days, got '99999-00'"):
        parse_time_limit("99999-00")
