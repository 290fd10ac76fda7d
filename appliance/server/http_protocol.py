"""The HTTP/1.1 protocol every HTTP door serves: uvicorn's httptools protocol, answering a
request it cannot read at all (a malformed request line, header or chunk) as the REST API
answers every refusal: a JSON error naming the field, here `request`.

uvicorn answers those with `Invalid HTTP request received.` as text/plain, before any route
runs: the one refusal of the API a client could not read as the others. The request never
reached the application, so nothing was done and nothing is audited.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

UNREADABLE = (
    "the request is not readable HTTP/1.1 (its request line, a header or its body's framing); "
    "send it again as HTTP/1.1"
)
BODY = json.dumps(
    {"error": {"code": "invalid_request", "message": UNREADABLE, "field": "request"}}
).encode()


class JsonErrorsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (the one it picks by default), with its 400 for an
    unreadable request in the API's JSON error shape."""

    def send_400_response(self, msg: str) -> None:
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(BODY)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                BODY,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
