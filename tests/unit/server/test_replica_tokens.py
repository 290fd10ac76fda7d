"""The key replica and data-plane tokens derive from: made once, whole, private; a short one
refused rather than used."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from appliance.server.replica_tokens import MIN_KEY_BYTES, ReplicaTokens


def test_the_key_is_made_once_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "data" / "replica-token.key"
    first = ReplicaTokens.from_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_bytes()) == MIN_KEY_BYTES
    again = ReplicaTokens.from_key_file(path)  # a restarted coordinator
    assert again.token_for("wsjob-a", 1) == first.token_for("wsjob-a", 1)
    assert again.dataplane_token("wsjob-a") == first.dataplane_token("wsjob-a")
    assert first.dataplane_token("wsjob-a") != first.token_for("wsjob-a", 1)
    assert [p.name for p in path.parent.iterdir()] == ["replica-token.key"]  # no leftovers


def test_a_short_key_is_refused_not_used(tmp_path: Path) -> None:
    path = tmp_path / "replica-token.key"
    path.write_bytes(b"")  # what a crash between create and write used to leave
    with pytest.raises(ValueError, match="holds 0 bytes, fewer than 32"):
        ReplicaTokens.from_key_file(path)


def test_the_replica_token_is_only_in_the_environment_with_authentication_on(
    tmp_path: Path,
) -> None:
    key = tmp_path / "k"
    assert set(ReplicaTokens.from_key_file(key, control=False).environment("wsjob-a", 1)) == {
        "APPLIANCE_DATAPLANE_TOKEN"
    }
    assert set(ReplicaTokens.from_key_file(key).environment("wsjob-a", 1)) == {
        "APPLIANCE_DATAPLANE_TOKEN",
        "APPLIANCE_REPLICA_TOKEN",
    }


def test_each_attempt_has_its_own_tokens(tmp_path: Path) -> None:
    """A replica of an attempt torn down can call neither into the next attempt's replicas nor
    for it towards the coordinator."""
    tokens = ReplicaTokens.from_key_file(tmp_path / "k")
    first, second = (tokens.environment("wsjob-a", n) for n in (1, 2))
    assert first["APPLIANCE_DATAPLANE_TOKEN"] != second["APPLIANCE_DATAPLANE_TOKEN"]
    assert first["APPLIANCE_REPLICA_TOKEN"] != second["APPLIANCE_REPLICA_TOKEN"]
    assert tokens.valid("wsjob-a", 2, second["APPLIANCE_REPLICA_TOKEN"])
    assert not tokens.valid("wsjob-a", 2, first["APPLIANCE_REPLICA_TOKEN"])
