"""The dashboard's sessions: an opaque id in the cookie, never the token; a session ends when
idle too long, when too old however used, when its token is revoked (for good), and the least
recently used one when too many are open."""

from __future__ import annotations

from http.cookies import SimpleCookie
from pathlib import Path

import pytest
import yaml
from fastapi import Request, Response

from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator, create_token
from appliance.server.web.session import COOKIE, IDLE_SECONDS, LIFETIME_SECONDS, Sessions
from tests.unit.harness import Clock


def _request(session_id: str = "") -> Request:
    headers = [(b"cookie", f"{COOKIE}={session_id}".encode())] if session_id else []
    scope = {"type": "http", "method": "GET", "scheme": "http", "path": "/",
             "query_string": b"", "headers": headers, "server": ("127.0.0.1", 80)}  # fmt: skip
    return Request(scope)


def _log_in(sessions: Sessions, token: str) -> str:
    answer = Response()
    sessions.log_in(answer, _request(), token)
    cookie = SimpleCookie(answer.headers["set-cookie"])[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "strict" and not cookie["secure"]
    return cookie.value


async def _user(sessions: Sessions, session_id: str) -> str:
    principal = await sessions.caller(_request(session_id))
    assert principal is not None
    return principal.user


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "tokens.yaml"
    return path, create_token(path, "alice", [], False), create_token(path, "bob", [], False)


async def test_the_cookie_is_an_opaque_id_that_ends_when_idle_or_old(
    tokens: tuple[Path, str, str],
) -> None:
    path, alice, _ = tokens
    clock = Clock()
    sessions = Sessions(Authenticator.from_file(path), clock)
    used, opened = _log_in(sessions, alice), clock.now
    assert alice not in used and len(used) >= 32
    assert await _user(sessions, used) == "alice"
    while clock.now + IDLE_SECONDS / 2 - opened <= LIFETIME_SECONDS:  # used: never idle
        clock.now += IDLE_SECONDS / 2
        assert await _user(sessions, used) == "alice"
    clock.now += IDLE_SECONDS / 2
    with pytest.raises(Unauthenticated, match="session has ended"):
        await sessions.caller(_request(used))  # too old, however used

    idle = _log_in(sessions, alice)
    clock.now += IDLE_SECONDS + 1
    with pytest.raises(Unauthenticated, match="session has ended"):
        await sessions.caller(_request(idle))


async def test_a_revoked_token_ends_its_sessions_for_good(tokens: tuple[Path, str, str]) -> None:
    path, alice, _ = tokens
    auth = Authenticator.from_file(path)
    sessions = Sessions(auth)
    session_id = _log_in(sessions, alice)
    kept = path.read_text()
    path.write_text(yaml.safe_dump({"tokens": []}))
    auth.reload()
    with pytest.raises(Unauthenticated, match="not recognised"):
        await sessions.caller(_request(session_id))
    path.write_text(kept)
    auth.reload()
    with pytest.raises(Unauthenticated, match="session has ended"):
        await sessions.caller(_request(session_id))


async def test_too_many_sessions_end_the_least_recently_used(
    tokens: tuple[Path, str, str],
) -> None:
    path, alice, bob = tokens
    sessions = Sessions(Authenticator.from_file(path), max_sessions=2)
    first, second = _log_in(sessions, alice), _log_in(sessions, bob)
    assert await _user(sessions, first) == "alice"  # used: now the second is the oldest
    third = _log_in(sessions, bob)
    with pytest.raises(Unauthenticated):
        await sessions.caller(_request(second))
    assert [await _user(sessions, s) for s in (first, third)] == ["alice", "bob"]


async def test_logout_ends_the_session(tokens: tuple[Path, str, str]) -> None:
    path, alice, _ = tokens
    sessions = Sessions(Authenticator.from_file(path))
    session_id = _log_in(sessions, alice)
    sessions.log_out(Response(), _request(session_id))
    with pytest.raises(Unauthenticated):
        await sessions.caller(_request(session_id))


async def test_a_session_ends_when_its_token_expires(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    wall = Clock(1_700_000_000.0)
    carol = create_token(path, "carol", [], False, ttl=600, now=wall.now)
    auth = Authenticator.from_file(path, wall)
    sessions = Sessions(auth, Clock())
    session = _log_in(sessions, carol)
    assert await _user(sessions, session) == "carol"
    wall.now += 600
    with pytest.raises(Unauthenticated, match="expired at"):
        await _user(sessions, session)
    with pytest.raises(Unauthenticated, match="session has ended"):  # for good
        await _user(sessions, session)
