"""The coordinator's HTTP listening socket: accepted connections do not wait on Nagle."""

from __future__ import annotations

import socket

from appliance.server.app import listen_tcp


def test_accepted_connections_send_small_writes_at_once() -> None:
    listener = listen_tcp("127.0.0.1", 0)
    client = socket.create_connection(listener.getsockname()[:2])
    accepted, _ = listener.accept()
    try:
        # uvicorn writes a response's headers and body separately; with Nagle on, the body of
        # every keep-alive response waited 40 ms for the client's delayed ACK.
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for sock in (accepted, client, listener):
            sock.close()
