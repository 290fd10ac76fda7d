"""Tokens expire: the Authenticator refuses a token from its expiry on (by the wall clock it is
given), saying when it expired, and a long-lived stream ends within STREAM_RECHECK_SECONDS of
the expiry even when it has nothing to send. Tokens written before ids and expiry existed keep
working and get a stable id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from appliance.domain.auth import Principal
from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator, digest
from appliance.server.streams import rechecked
from appliance.server.tokens_file import (
    MAX_TTL_SECONDS,
    add_token,
    parse_ttl,
    read_entries,
    revoke_token,
    rotate_token,
)
from tests.unit.harness import NOW, Clock

ALICE = Principal("alice", ("nlp",), admin=False)


def _auth(path: Path, wall: Clock) -> Authenticator:
    auth = Authenticator.from_file(path, wall)
    return auth


def test_a_token_works_until_its_expiry_and_is_then_refused_saying_when(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    wall = Clock(NOW)
    token, entry = add_token(path, ALICE, ttl=3600, now=NOW)
    forever, _ = add_token(path, Principal("root", (), admin=True), ttl=None, now=NOW)
    auth = _auth(path, wall)
    assert auth.principal(f"Bearer {token}") == ALICE
    wall.now = NOW + 3599.9
    assert auth.principal(f"Bearer {token}") == ALICE
    wall.now = NOW + 3600
    with pytest.raises(
        Unauthenticated, match=rf"token {entry.id} expired at 2023-11-14T23:13:20Z"
    ):
        auth.principal(f"Bearer {token}")
    wall.now = NOW + 100 * 365 * 86400.0
    assert auth.principal(f"Bearer {forever}").admin


def test_revoke_removes_one_token_and_rotate_keeps_the_principal(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    wall = Clock(NOW)
    old, entry = add_token(path, ALICE, ttl=86400, now=NOW)
    other, _ = add_token(path, ALICE, ttl=None, now=NOW)
    auth = _auth(path, wall)
    new, rotated = rotate_token(path, entry.id, ttl=7200, overlap=600, now=NOW + 10)
    auth.reload()
    assert rotated.id != entry.id and rotated.expires == NOW + 10 + 7200
    assert auth.principal(f"Bearer {new}") == ALICE
    assert auth.principal(f"Bearer {old}") == ALICE  # during the overlap
    wall.now = NOW + 10 + 600
    with pytest.raises(Unauthenticated, match="expired"):
        auth.principal(f"Bearer {old}")

    revoke_token(path, rotated.id)
    auth.reload()
    with pytest.raises(Unauthenticated, match="not recognised"):
        auth.principal(f"Bearer {new}")
    assert auth.principal(f"Bearer {other}") == ALICE
    with pytest.raises(LookupError, match="no token with id 'nope'"):
        revoke_token(path, "nope")
    assert path.stat().st_mode & 0o777 == 0o600


def test_ids_are_random_and_the_file_holds_no_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    made = [add_token(path, ALICE, ttl=None) for _ in range(20)]
    ids = {entry.id for _, entry in made}
    assert len(ids) == 20
    assert all(entry.id not in entry.sha256 for _, entry in made)  # not derived from it
    assert not any(token in path.read_text() for token, _ in made)


def test_a_file_written_before_ids_and_expiry_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    sha = digest("old-token")
    path.write_text(f"tokens:\n  - user: alice\n    groups: [nlp]\n    sha256: {sha}\n")
    auth = _auth(path, Clock(NOW + 1e9))
    assert auth.principal("Bearer old-token") == ALICE  # never expires
    [legacy] = read_entries(path)
    assert (legacy.id, legacy.created, legacy.expires) == (sha[:8], None, None)
    add_token(path, ALICE, ttl=60)  # written back with that same id
    assert read_entries(path)[0].id == sha[:8]
    revoke_token(path, sha[:8])
    auth.reload()
    with pytest.raises(Unauthenticated):
        auth.principal("Bearer old-token")


@pytest.mark.parametrize(
    "hostile",
    ["", "abc", "-5m", "1.5h", "5 m", "5y", "10", "1e9d", "99999999d", "3651d", "9" * 10_000,
     "5m\n", "\u0665m"],
)  # fmt: skip
def test_hostile_ttls_are_refused_in_one_line(hostile: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_ttl(hostile)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 200


def test_ttls() -> None:
    assert (
        parse_ttl("30m") == 1800 and parse_ttl("12h") == 43200 and parse_ttl("90d") == 90 * 86400
    )
    assert parse_ttl("0") is None and parse_ttl("never") is None
    assert parse_ttl("3650d") == MAX_TTL_SECONDS


def test_a_broken_time_in_the_file_refuses_every_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    token, _ = add_token(path, ALICE, ttl=60)
    auth = Authenticator.from_file(path)
    entries = yaml.safe_load(path.read_text())["tokens"]
    entries[0]["expires"] = "soon"
    path.write_text(yaml.safe_dump({"tokens": entries}))
    auth.reload()
    with pytest.raises(Unauthenticated):
        auth.principal(f"Bearer {token}")


async def test_a_quiet_stream_ends_once_its_token_expires(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    wall = Clock(NOW)
    token, _ = add_token(path, ALICE, ttl=60, now=NOW)
    auth = _auth(path, wall)

    checks: list[float] = []
    three = asyncio.Event()

    async def recheck() -> Principal:
        checks.append(wall.now)
        if len(checks) == 3:
            three.set()
        return auth.principal(f"Bearer {token}")

    async def quiet() -> AsyncIterator[int]:
        await asyncio.Event().wait()
        yield 0

    stream = rechecked(quiet(), recheck, recheck_every=0.01)
    reading = asyncio.ensure_future(anext(stream))
    await asyncio.wait_for(three.wait(), 5)  # re-checked on its own while nothing comes
    assert not reading.done()
    wall.now = NOW + 60
    with pytest.raises(Unauthenticated, match="expired"):
        await asyncio.wait_for(reading, 5)
