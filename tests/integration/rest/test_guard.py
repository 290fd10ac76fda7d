"""A body is never read before its request may be served: no token is 401 and an oversized body
413 straight from the headers, and a body without a declared length is cut off at the limit.
Raw sockets against the live server, so what is (not) sent is exactly what the test says."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator

LIMIT = 64 << 10


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, str]]:
    tokens_file = tmp_path / "tokens.yaml"
    token = create_token(tokens_file, "alice", [], admin=False)
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file, http_max_body_bytes=LIMIT
    ).start()
    try:
        yield running.coordinator.http_port, token
    finally:
        running.stop()


def _exchange(
    port: int, head: str, body_parts: Sequence[bytes] = ()
) -> tuple[int, dict[str, str]]:
    """Send `head` and `body_parts`, then read the whole response (the server closes or the
    response has a length): (status, error)."""
    context = ssl.create_default_context()  # the session's CA (SSL_CERT_FILE)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw_conn,
        context.wrap_socket(raw_conn, server_hostname="127.0.0.1") as conn,
    ):
        conn.sendall(head.encode())
        for part in body_parts:
            conn.sendall(part)
        raw = b""
        while b"\r\n\r\n" not in raw:
            received = conn.recv(65536)
            assert received, f"the server closed after {raw!r}"
            raw += received
        header, _, rest = raw.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += conn.recv(65536)
    status = int(header.split(b" ", 2)[1])
    error: dict[str, str] = json.loads(rest[:length])["error"]
    return status, error


def _post(length: int | None, token: str | None = None) -> str:
    lines = ["POST /api/v1/jobs HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    return "\r\n".join(lines) + "\r\n\r\n"


def test_no_token_is_401_before_a_200_mb_body_is_sent(served: tuple[int, str]) -> None:
    port, _ = served
    # Only the headers are sent: a server that read the body first would wait for 200 MB.
    status, error = _exchange(port, _post(200 << 20))
    assert (status, error["code"]) == (401, "unauthenticated")
    assert "authentication is required" in error["message"]


def test_a_declared_length_over_the_limit_is_413_before_the_body(served: tuple[int, str]) -> None:
    port, token = served
    status, error = _exchange(port, _post(200 << 20, token))
    assert (status, error["code"], error["field"]) == (413, "request_entity_too_large", "body")
    assert error["message"] == f"the request body is larger than {LIMIT} bytes"


def test_a_body_without_a_length_is_cut_off_at_the_limit(served: tuple[int, str]) -> None:
    port, token = served
    chunk = b"x" * 16384
    chunks = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * ((LIMIT // len(chunk)) + 2)
    status, error = _exchange(port, _post(None, token), [*chunks, b"0\r\n\r\n"])
    assert (status, error["field"]) == (413, "body")


def test_a_body_within_the_limit_is_served(served: tuple[int, str]) -> None:
    port, token = served
    body = json.dumps({"params": "model: {name: fc_mnist}\n", "num_csx": 9, "num_steps": 1})
    status, error = _exchange(port, _post(len(body), token), [body.encode()])
    assert (status, error["field"]) == (422, "num_csx")  # read, parsed and judged


@pytest.mark.parametrize(
    "head",
    [
        "GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",  # no colon
        "NOT A REQUEST LINE\r\n\r\n",
        # A chunk size that is not hexadecimal: the body's framing cannot be read.
        "POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        "zz\r\n{}\r\n0\r\n\r\n",
    ],
    ids=["header-without-colon", "request-line", "chunk-framing"],
)
def test_an_unreadable_request_is_refused_as_json_naming_the_request(
    served: tuple[int, str], head: str
) -> None:
    """uvicorn's own 400 for a request it cannot parse is text/plain; every refusal of the API
    is JSON naming a field, this one too."""
    port, _ = served
    status, error = _exchange(port, head)
    assert status == 400
    assert error["field"] == "request"
    assert error["code"] == "invalid_request"
