"""The audit log's use case (services/audit.py) over a real store: what it keeps of a record at
each level, and that a store that cannot be written never reaches the caller."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from pathlib import Path

import pytest

from appliance.config.groups import AuditSettings
from appliance.domain.audit import AuditEvent, AuditLevel, AuditQuery, Door, Outcome
from appliance.domain.auth import Principal
from appliance.domain.errors import PermissionDenied
from appliance.services import audit
from appliance.services.audit import AuditTrail, request_id
from appliance.services.context import Context
from appliance.store.engine import make_engine
from appliance.store.jobs import JobStore
from tests.unit.harness import Clock

EVENT = AuditEvent(
    at=0.0, request_id="r-1", user="alice\nforged", groups=("nlp",), admin=False,
    source="ipv4:127.0.0.1:5000", door=Door.GRPC, verb="submit", object_kind="job",
    object_name="wsjob-a", outcome=Outcome.ALLOWED, body_sha256="ab" * 32, body_bytes=10,
)  # fmt: skip
ADMIN = Principal(user="root", admin=True)


async def test_metadata_keeps_no_body_digest_and_stamps_and_flattens(ctx: Context) -> None:
    sink = io.StringIO()
    trail = AuditTrail(ctx, AuditSettings(AuditLevel.METADATA), sink)
    trail.record(EVENT)
    await trail.flush()
    [stored] = await trail.list(AuditQuery(), ADMIN)
    assert (stored.body_sha256, stored.body_bytes) == ("", -1)
    assert stored.at > 0 and stored.user == "alice forged"  # one line, always
    assert json.loads(sink.getvalue())["user"] == "alice forged"


async def test_request_keeps_the_digest_and_none_keeps_nothing(ctx: Context) -> None:
    request = AuditTrail(ctx, AuditSettings(AuditLevel.REQUEST))
    request.record(EVENT)
    await request.flush()
    nothing = AuditTrail(ctx, AuditSettings(AuditLevel.NONE))
    nothing.record(EVENT)
    await nothing.flush()
    [stored] = await request.list(AuditQuery(), ADMIN)
    assert (stored.body_sha256, stored.body_bytes) == ("ab" * 32, 10)


async def test_a_store_that_cannot_be_written_is_logged_never_raised(
    ctx: Context, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = make_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'jobs.db'}")
    trail = AuditTrail(dataclasses.replace(ctx, store=JobStore(nowhere)), AuditSettings())
    with caplog.at_level(logging.ERROR):
        trail.record(EVENT)
        await trail.flush()
    assert "audit: 1 record(s) not written" in caplog.text
    nowhere.dispose()


async def test_a_full_queue_drops_and_says_so(
    ctx: Context, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(audit, "MAX_PENDING", 2)
    trail = AuditTrail(ctx, AuditSettings())
    with caplog.at_level(logging.ERROR):
        for _ in range(5):
            trail.record(EVENT)
        await trail.flush()
    assert len(await trail.list(AuditQuery(), ADMIN)) == 2
    assert "audit: 3 record(s) dropped" in caplog.text


async def test_a_limits_refusals_are_one_record_then_a_count_per_second(
    ctx: Context, clock: Clock
) -> None:
    trail = AuditTrail(ctx, AuditSettings())
    refused = dataclasses.replace(
        EVENT, user="mallory", outcome=Outcome.REFUSED, verb="list-jobs", reason="over the rate"
    )
    for _second in range(3):  # 3 seconds of 1,000 refusals each, and one of bob's
        for _ in range(1000):
            trail.record_limited(refused, "requests_per_second")
            clock.now += 0.0009
        clock.now += 0.2
    trail.record_limited(dataclasses.replace(refused, user="bob"), "requests_per_second")
    await trail.flush(final=True)
    events = list(reversed(await trail.list(AuditQuery(), ADMIN)))
    seen = [(e.user, e.verb, e.target) for e in events]
    first, count = (
        ("mallory", "list-jobs", "job/wsjob-a"),
        ("mallory", "limit-exceeded", "limit/requests_per_second"),
    )
    bob = ("bob", "list-jobs", "job/wsjob-a")
    # The last second's count is written as the coordinator stops (flush final).
    assert seen == [first, count, first, count, first, bob, count]
    counts = [e.reason.split()[0] for e in events if e.verb == "limit-exceeded"]
    assert counts == ["999"] * 3
    assert "refused by the requests_per_second limit" in events[1].reason


async def test_only_admins_read(ctx: Context) -> None:
    trail = AuditTrail(ctx, AuditSettings())
    with pytest.raises(PermissionDenied):
        await trail.list(AuditQuery(), Principal(user="alice"))
    assert await trail.list(AuditQuery(), None) == []  # authentication off: everyone is admin


def test_a_request_id_is_the_callers_only_when_plain() -> None:
    assert request_id("abc-123") == "abc-123"
    assert request_id("a b") != "a b" and len(request_id("")) == 32
    assert len(request_id("x" * 65)) == 32
