"""The tokens file is followed: a removed token is refused once the file's change is seen (at
most RELOAD_CHECK_SECONDS later, at once on reload), and a file that cannot be read refuses
every token rather than keeping revoked ones alive."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance.domain.errors import Unauthenticated
from appliance.server.auth import RELOAD_CHECK_SECONDS, Authenticator, create_token


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_removed_token_is_refused_once_the_change_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    alice = create_token(path, "alice", ["nlp"], admin=False)
    bob = create_token(path, "bob", [], admin=False)
    clock = Clock()
    auth = Authenticator(None, path, clock)
    auth.reload()
    assert auth.caller(_bearer(bob)).user == "bob"  # type: ignore[union-attr]

    entries = yaml.safe_load(path.read_text())["tokens"]
    path.write_text(yaml.safe_dump({"tokens": [e for e in entries if e["user"] != "bob"]}))
    assert auth.caller(_bearer(bob)).user == "bob"  # type: ignore[union-attr]  # not yet looked
    clock.now += RELOAD_CHECK_SECONDS + 0.01
    with pytest.raises(Unauthenticated, match="not recognised"):
        auth.caller(_bearer(bob))
    assert auth.caller(_bearer(alice)).user == "alice"  # type: ignore[union-attr]

    carol = create_token(path, "carol", [], admin=True)
    auth.reload()  # SIGHUP: at once, whatever the clock says
    assert auth.caller(_bearer(carol)).admin  # type: ignore[union-attr]


def test_an_unreadable_tokens_file_refuses_every_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    alice = create_token(path, "alice", [], admin=False)
    auth = Authenticator.from_file(path)
    assert auth.caller(_bearer(alice)).user == "alice"  # type: ignore[union-attr]
    path.write_text("tokens: [{user: alice}]\n")  # no digest: not a tokens file
    auth.reload()
    with pytest.raises(Unauthenticated):
        auth.caller(_bearer(alice))
    path.unlink()
    auth.reload()
    assert auth.enabled  # still on: a deleted file does not open the coordinator
    with pytest.raises(Unauthenticated):
        auth.caller(_bearer(alice))
