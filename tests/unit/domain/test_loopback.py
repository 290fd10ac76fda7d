"""Where plaintext may go: loopback addresses only (domain/auth.py `is_loopback`)."""

from __future__ import annotations

import pytest

from appliance.domain.auth import is_loopback


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:50051", "127.8.9.10:1", "[::1]:50051", "::1", "localhost:50051", "localhost",
     "dns:///localhost:1", "ipv4:127.0.0.1:5", "unix:/run/x.sock"],
)  # fmt: skip
def test_loopback(address: str) -> None:
    assert is_loopback(address)


@pytest.mark.parametrize(
    "address",
    ["10.0.0.1:50051", "0.0.0.0:1", "[::]:1", "coordinator:50051", "localhost.evil.example:1",
     "127.0.0.1.nip.io:1", "[::ffff:10.0.0.1]:1", ""],
)  # fmt: skip
def test_not_loopback(address: str) -> None:
    assert not is_loopback(address)
