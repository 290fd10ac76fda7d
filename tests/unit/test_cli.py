"""What `appliance serve` tells a user about where to reach it (appliance/cli.py)."""

from __future__ import annotations

import pytest

from appliance.cli import dial_address


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("0.0.0.0", "127.0.0.1:50051"),
        ("::", "127.0.0.1:50051"),
        ("", "127.0.0.1:50051"),
        ("127.0.0.1", "127.0.0.1:50051"),
        ("10.1.2.3", "10.1.2.3:50051"),
        ("fd00::5", "[fd00::5]:50051"),
    ],
)
def test_a_wildcard_bind_is_dialled_on_loopback(host: str, address: str) -> None:
    assert dial_address(host, 50051) == address
