"""The per-user limits use case over a real store: buckets and stream slots per user on a
clock the test moves, the submit refused over the queued caps (in all and per queue), the
refusals counted, and the limits file followed on change."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import LimitExceeded, PermissionDenied
from appliance.domain.spec import validate_spec
from appliance.services.context import Context
from appliance.services.jobs import JobService
from appliance.services.limits import Limits
from appliance.services.limits_file import LimitsFile, LimitsFileError
from appliance.services.model_dirs import ModelDirs
from tests.unit.harness import PARAMS, Clock, data_dir

LIMITS = """
defaults: {streams: 2, requests_per_second: 1, burst: 2, queued_jobs: 3}
groups: {nlp: {queued_jobs: 4}}
queues: {default: {queued_jobs_per_user: 2}, small: {queued_jobs_per_user: 1}}
"""


def limits_over(ctx: Context, path: Path, text: str = LIMITS) -> Limits:
    path.write_text(text)
    clock = ctx.clock
    source = LimitsFile(path, clock=clock)

    async def waiting(user: str) -> dict[str, int]:
        return await ctx.read(ctx.store.waiting_jobs_of, user)

    async def sleep(seconds: float) -> None:  # time passes on the test's clock
        assert isinstance(clock, Clock)
        await asyncio.sleep(0)  # the others run meanwhile
        clock.now += seconds

    return Limits(source, waiting, ctx.metrics, clock=clock, sleep=sleep)


def refusals(ctx: Context, limit: str, door: str) -> float:
    value = ctx.metrics.registry.get_sample_value(
        "appliance_limit_refusals_total", {"limit": limit, "door": door}
    )
    return value or 0.0


async def test_each_user_has_a_bucket_and_waits_in_line_for_its_tokens(
    ctx: Context, tmp_path: Path
) -> None:
    limits, clock = limits_over(ctx, tmp_path / "limits.yaml"), ctx.clock
    assert isinstance(clock, Clock)
    start = clock.now
    await limits.admit_call("alice", (), "grpc")
    await limits.admit_call("alice", (), "grpc")  # her burst of 2, at once
    assert clock.now == start
    await limits.admit_call("alice", (), "grpc")  # the next token comes in 1 s: she waits
    assert clock.now == pytest.approx(start + 1.0)
    await limits.admit_call("bob", (), "grpc")  # bob's bucket is his own
    assert clock.now == pytest.approx(start + 1.0)
    await limits.admit_call("alice", (), "rest")  # owed: her next token is 1 s away
    assert clock.now == pytest.approx(start + 2.0)
    # Two calls at once, each waiting for a token 1 s apart: the second would wait 2 s, more
    # than MAX_WAIT_SECONDS, and is refused after HOLD_SECONDS.
    first, second = await asyncio.gather(
        limits.admit_call("alice", (), "grpc"),
        limits.admit_call("alice", (), "grpc"),
        return_exceptions=True,
    )
    assert first is None
    assert isinstance(second, LimitExceeded)
    assert second.message.startswith("alice is over the request rate limit (1 requests")
    assert second.retry_after > 0
    assert refusals(ctx, "requests_per_second", "grpc") == 1


async def test_streams_are_capped_per_user_and_given_back(ctx: Context, tmp_path: Path) -> None:
    limits = limits_over(ctx, tmp_path / "limits.yaml")
    slots = [limits.open_stream("alice", (), "grpc") for _ in range(2)]
    with pytest.raises(LimitExceeded, match="alice has 2 streams open"):
        limits.open_stream("alice", (), "rest")
    other = limits.open_stream("bob", (), "grpc")
    slots[0].release()
    slots[0].release()  # once only
    assert limits.streams_open("alice") == 1
    limits.open_stream("alice", (), "web")
    assert refusals(ctx, "streams", "rest") == 1
    assert ctx.metrics.registry.get_sample_value("appliance_user_streams_open") == 3
    other.release()


async def test_a_submit_over_the_queued_caps_is_refused_naming_the_cap(
    ctx: Context, tmp_path: Path
) -> None:
    limits = limits_over(ctx, tmp_path / "limits.yaml")
    jobs = JobService(ctx, ModelDirs(data_dir(ctx) / "model_dirs"), limits=limits)
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5)
    for _ in range(2):
        await jobs.submit(spec, "alice")
    with pytest.raises(LimitExceeded, match="alice has 2 jobs waiting in queue default") as info:
        await jobs.submit(spec, "alice")
    assert info.value.limit == "queued_jobs_per_queue"
    await jobs.submit(spec, "bob")  # another user's cap is their own
    report = await limits.report("alice")
    assert dict(report.waiting) == {"default": 2}
    assert refusals(ctx, "queued_jobs_per_queue", "internal") == 1


async def test_the_total_cap_counts_every_queue(ctx: Context, tmp_path: Path) -> None:
    limits = limits_over(ctx, tmp_path / "limits.yaml", "defaults: {queued_jobs: 2}\n")
    jobs = JobService(ctx, ModelDirs(data_dir(ctx) / "model_dirs"), limits=limits)
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5)
    nlp = Principal("carol", groups=("nlp",))
    await jobs.submit(spec, "carol", by=nlp)
    await jobs.submit(spec, "carol", by=nlp)
    with pytest.raises(
        LimitExceeded,
        match="carol has 2 jobs waiting to run, the limit of queued jobs per user is 2",
    ):
        await jobs.submit(spec, "carol", by=nlp)


async def test_another_users_limits_are_for_admins(ctx: Context, tmp_path: Path) -> None:
    limits = limits_over(ctx, tmp_path / "limits.yaml")
    alice = Principal("alice", groups=("nlp",))
    own = await limits.report_for(alice, None)
    assert (own.user, own.caps.queued_jobs) == ("alice", 4)  # her group's override
    with pytest.raises(PermissionDenied, match="only their own limits"):
        await limits.report_for(alice, None, "bob")
    assert (await limits.report_for(Principal("root", admin=True), None, "bob")).user == "bob"
    assert (await limits.report_for(None, "dave", "")).user == "dave"  # auth off: the claim


def test_the_limits_file_is_followed_and_a_broken_one_keeps_the_last(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text("defaults: {streams: 3}\n")
    now = [0.0]
    source = LimitsFile(path, clock=lambda: now[0])
    assert source.policy().defaults.streams == 3
    path.write_text("defaults: {streams: 40}\n")
    os.utime(path, ns=(1, 10**9 * 5))
    assert source.policy().defaults.streams == 3  # looked at again only after a second
    now[0] += 1.0
    assert source.policy().defaults.streams == 40
    path.write_text("defaults: {streams: -4}\n")
    now[0] += 1.0
    assert source.policy().defaults.streams == 40  # a typo does not lift the caps
    with pytest.raises(LimitsFileError, match=r"limits\.yaml: defaults\.streams must be"):
        LimitsFile(path)
    with pytest.raises(LimitsFileError, match="cannot read the limits file"):
        LimitsFile(path.with_name("gone.yaml"))
    assert LimitsFile(None, enabled=False).policy().caps_of("alice").streams is None
