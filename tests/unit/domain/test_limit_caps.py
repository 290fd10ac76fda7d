"""Per-user limits, pure: the token bucket on a clock the test moves, a user's caps from the
defaults and the overrides, the refusals, and a limits file's hostile values refused with a
line naming the field."""

from __future__ import annotations

import pytest

from appliance.domain.errors import InvalidSpec, LimitExceeded
from appliance.domain.limits import Caps, TokenBucket, check_queued, check_streams
from appliance.domain.limits_document import parse_limits


def test_the_bucket_gives_a_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)  # one token comes back in 1/rate s
    assert bucket.take(100.25) == pytest.approx(0.25)  # nothing taken by a refused call
    assert bucket.take(100.5) == 0.0
    assert bucket.level(200.0) == 3.0  # never more than the burst
    bucket.retune(1.0, 1)
    assert bucket.level(200.0) == 1.0 and bucket.take(200.0) == 0.0
    assert bucket.take(200.0) == pytest.approx(1.0)
    assert bucket.level(150.0) == pytest.approx(0.0)  # a clock stepping back gives nothing


def test_a_reserved_token_is_owed_and_waited_for_up_to_a_bound() -> None:
    bucket = TokenBucket(rate=10.0, burst=1, now=0.0)
    assert bucket.reserve(0.0, most=0.25) == 0.0
    assert bucket.reserve(0.0, most=0.25) == pytest.approx(0.1)
    assert bucket.reserve(0.0, most=0.25) == pytest.approx(0.2)  # in line behind the last
    assert bucket.reserve(0.0, most=0.25) is None  # 0.3 s away: nothing taken
    assert bucket.until_token(0.3) == pytest.approx(0.0)


def test_a_users_caps_are_their_own_then_their_most_generous_groups_then_the_defaults() -> None:
    policy = parse_limits(
        """
defaults: {streams: 10, queued_jobs: 5}
groups:
  nlp: {streams: 20, queued_jobs: 7}
  cv: {streams: unlimited}
  ml: {queued_jobs: 9}
users:
  alice: {streams: 2}
queues:
  small: {queued_jobs_per_user: 1}
"""
    )
    assert policy.caps_of("dave") == Caps(streams=10, queued_jobs=5)
    assert policy.caps_of("dave", ("nlp",)) == Caps(streams=20, queued_jobs=7)
    assert policy.caps_of("dave", ("nlp", "cv", "ml")) == Caps(streams=None, queued_jobs=9)
    assert policy.caps_of("alice", ("nlp",)) == Caps(streams=2, queued_jobs=7)
    assert policy.queue_cap("small") == 1 and policy.queue_cap("other") is None
    off = parse_limits(
        "enabled: false\ndefaults: {streams: 1}\nqueues: {small: {queued_jobs_per_user: 1}}"
    )
    assert off.caps_of("alice").streams is None and off.queue_cap("small") is None
    assert parse_limits("").caps_of("x") == Caps()  # the built-in defaults


def test_refusals_name_the_limit_and_the_count() -> None:
    caps = Caps(streams=2, queued_jobs=3)
    check_streams("alice", caps, 1)
    with pytest.raises(
        LimitExceeded, match=r"alice has 2 streams open.*limit of streams per user is 2"
    ) as info:
        check_streams("alice", caps, 2)
    assert info.value.limit == "streams" and info.value.retry_after > 0
    check_queued("alice", caps, {"default": 2}, "default", None)
    with pytest.raises(LimitExceeded, match=r"3 jobs waiting to run.*queued jobs per user is 3"):
        check_queued("alice", caps, {"default": 2, "small": 1}, "default", None)
    with pytest.raises(
        LimitExceeded, match=r"1 jobs waiting in queue small.*in that queue is 1"
    ) as q:
        check_queued("alice", caps, {"small": 1}, "small", 1)
    assert q.value.limit == "queued_jobs_per_queue"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("defaults: {streams: -1}", "defaults.streams"),
        ("defaults: {streams: 1e9}", "defaults.streams"),
        ("defaults: {streams: true}", "defaults.streams"),
        ("defaults: {streams: '12'}", "defaults.streams"),
        ("defaults: {requests_per_second: 0}", "defaults.requests_per_second"),
        ("defaults: {requests_per_second: .nan}", "defaults.requests_per_second"),
        ("defaults: {requests_per_second: .inf}", "defaults.requests_per_second"),
        ("defaults: {burst: 0}", "defaults.burst"),
        ("defaults: {burst: unlimited}", "defaults.burst"),
        ("defaults: {queued_jobs: 99999999999999999999}", "defaults.queued_jobs"),
        ("defaults: {streem: 1}", "defaults.streem"),
        ("defaults: [1, 2]", "defaults"),
        ("users: {'bad user': {streams: 1}}", "users.bad user"),
        ("users: {alice: {streams: [1]}}", "users.alice.streams"),
        ("groups: {nlp: 3}", "groups.nlp"),
        ("queues: {small: {queued_jobs_per_user: -2}}", "queues.small.queued_jobs_per_user"),
        ("queues: {small: {max: 2}}", "queues.small.max"),
        ("enabled: maybe", "enabled"),
        ("limit: {}", "limit"),
        ("defaults: {streams: 1, streams: 2}", "limits"),
        ("[" * 100, "limits"),
    ],
)
def test_a_hostile_limits_file_is_refused_with_a_line_naming_the_field(
    text: str, field: str
) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_limits(text, "the limits file f.yaml")
    assert info.value.field == field
    assert "\n" not in info.value.message
    if field != "limits":
        assert f"f.yaml: {field} " in info.value.message


def test_a_huge_limits_file_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(InvalidSpec, match="larger than"):
        parse_limits("#" * (2 << 20))


def test_running_systems_is_unlimited_by_default_and_overridden_per_user_or_group() -> None:
    assert Caps().running_systems is None and not parse_limits("").caps_running_systems
    policy = parse_limits(
        "groups: {nlp: {running_systems: 8}, cv: {running_systems: 2}}\n"
        "users: {alice: {running_systems: 1}, bob: {running_systems: unlimited}}\n"
    )
    assert policy.caps_running_systems
    assert policy.caps_of("alice", ("nlp",)).running_systems == 1
    assert policy.caps_of("dave", ("nlp", "cv")).running_systems == 8
    assert policy.caps_of("bob", ("cv",)).running_systems is None
    assert not parse_limits("enabled: false\ndefaults: {running_systems: 1}").caps_running_systems
    with pytest.raises(InvalidSpec, match=r"defaults\.running_systems must be a whole number"):
        parse_limits("defaults: {running_systems: 1.5}")
