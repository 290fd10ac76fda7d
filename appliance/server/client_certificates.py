"""The HTTPS doors' half of mutual TLS: a client certificate for every path but the probes'.

Under `tls_client_ca_file` the HTTPS handshake asks for a client certificate and verifies one
presented (a certificate of another CA fails the handshake), but lets a connection without one
through: the kubelet's HTTPS probes present none, and TLS cannot tell a probe's path from
another. So the refusal is made here, per request, as kube-apiserver makes it: the HTTP
protocol puts the certificate its connection presented into each request's scope (ASGI's TLS
extension, which uvicorn does not fill), and `ClientCertificateRequired` answers 401 to a
request without one, but for /healthz and /readyz (which say nothing but up and ready).

The certificate is read from the connection, never from a header: X-Forwarded-* cannot lend
one.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.domain.audit import AuditEvent, Door, Outcome
from appliance.server.http_protocol import JsonErrorsProtocol
from appliance.server.rest.errors import error_response
from appliance.services.audit import AuditTrail, request_id

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
REFUSAL = (
    "this appliance requires a client certificate (mutual TLS): present one signed by a CA "
    "it trusts (curl --cert FILE --key FILE; csctl --client-certificate/--client-key)"
)


class PresentedCertificateProtocol(JsonErrorsProtocol):
    """The doors' HTTP/1.1 protocol (`JsonErrorsProtocol`), telling each request of a
    connection the certificate that connection presented at its handshake."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
        chain = [] if der is None else [ssl.DER_cert_to_PEM_cert(der)]
        self.app = _with_tls_extension(self.app, chain)


def _with_tls_extension(app: Any, chain: list[str]) -> Any:
    async def presented(scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.setdefault("extensions", {})
        extensions["tls"] = {
            "server_cert": None,
            "client_cert_chain": chain,
            "client_cert_name": None,
            "client_cert_error": None,
            "tls_version": None,
            "cipher_suite": None,
        }
        await app(scope, receive, send)

    return presented


def presented_chain(scope: Scope) -> list[str]:
    """The verified client certificate chain (PEM) of the request's connection; [] for none."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    chain = tls.get("client_cert_chain") or []
    return list(chain)


class ClientCertificateRequired:
    """Refuses (401, one line) every request whose connection presented no client certificate,
    but the probes'."""

    def __init__(self, app: ASGIApp, trail: AuditTrail | None = None) -> None:
        self.app = app
        self.trail = trail  # its refusals on record, coalesced as a limit's are

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        probe = kind == "http" and scope["path"] in PROBE_PATHS
        if kind == "lifespan" or probe or presented_chain(scope):
            await self.app(scope, receive, send)
            return
        if kind in ("http", "websocket") and self.trail is not None:
            self.trail.record_limited(_refused(scope), "client-certificate")
        if kind == "http":
            response = error_response(401, "unauthenticated", REFUSAL)
            await response(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "client certificate"})


def _refused(scope: Scope) -> AuditEvent:
    """The audit record of a request refused for want of a client certificate: no one is known
    yet (its token is not read), so such refusals are coalesced together, a second at a time."""
    client = scope.get("client")
    headers = dict(scope.get("headers") or ())
    return AuditEvent(
        at=0.0, request_id=request_id(headers.get(b"x-request-id", b"").decode("latin-1")),
        user="", groups=(), admin=False,
        source=f"{client[0]}:{client[1]}" if client else "", door=Door.REST,
        verb=str(scope.get("method", "websocket")).lower(), object_kind="path",
        object_name=str(scope.get("path", "")), outcome=Outcome.REFUSED,
        reason="401: no client certificate (mutual TLS)",
    )  # fmt: skip
