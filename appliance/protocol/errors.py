"""The one mapping between the domain error taxonomy and gRPC status codes (both directions)."""

from __future__ import annotations

import grpc

from appliance.domain import errors

FIELD_KEY = "appliance-error-field"
# Seconds after which a call refused over a per-user limit may pass (server/grpc/limiting.py).
RETRY_AFTER_KEY = "retry-after"

# Most specific first: InsufficientCapacity is an InvalidSpec.
TO_CODE: tuple[tuple[type[errors.ApplianceError], grpc.StatusCode], ...] = (
    (errors.InvalidSpec, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.LimitExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
)
_FROM_CODE = {code: cls for cls, code in TO_CODE}


def code_for(exc: errors.ApplianceError) -> grpc.StatusCode:
    for cls, code in TO_CODE:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.UNKNOWN


def error_from_rpc(
    exc: grpc.RpcError, *, address: str = "", trust: str = "", identity: str | None = None
) -> errors.ApplianceError:
    """Turn a failed call into the project's own exception with the server's message.
    `trust` says how the client verifies the server, `identity` where the client certificate
    it presents comes from ("" for none; None: not known), for a failed TLS handshake's line."""
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    if code is grpc.StatusCode.UNAVAILABLE and address:
        tls = tls_failure(details or "", address, trust, identity)
        if tls is not None:
            return errors.Unavailable(tls)
    unreachable = code is grpc.StatusCode.DEADLINE_EXCEEDED or (
        code is grpc.StatusCode.UNAVAILABLE and (not details or "connect" in details.lower())
    )
    if unreachable and address:
        return errors.Unavailable(
            f"cannot reach the appliance at {address}; is `appliance serve` running there? "
            "(set --server or CSCTL_SERVER)"
        )
    field, retry_after = None, ""
    if isinstance(exc, grpc.Call):
        for key, value in exc.trailing_metadata() or ():
            if key == FIELD_KEY:
                field = str(value)
            elif key == RETRY_AFTER_KEY:
                retry_after = str(value)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        wait = float(retry_after) if retry_after.isdigit() and len(retry_after) < 8 else 1.0
        message = details or "request refused: over a limit"
        return errors.LimitExceeded(message, limit="", retry_after=wait)
    cls = _FROM_CODE.get(code, errors.ApplianceError)
    return cls(details or f"request failed: {code.name}", field=field)


# What gRPC's core says when a handshake fails, and the line a user gets for it.
_TLS_FAILURES = (
    ("CERTIFICATE_VERIFY_FAILED", "its certificate is not signed by {trust}"),
    ("Hostname Verification", "its certificate is not for the name or address dialled"),
    ("Peer name", "its certificate is not for the name or address dialled ({reason})"),
    ("WRONG_VERSION_NUMBER", "it does not speak TLS (is it serving with --insecure?)"),
    ("Tls handshake failed", "the TLS handshake failed ({reason})"),
    ("Ssl handshake failed", "the TLS handshake failed ({reason})"),
)
_PLAINTEXT_TO_TLS = "Socket closed"
_AT_CONNECT = "failed to connect"  # not a call the server's going away broke


def tls_failure(details: str, address: str, trust: str, identity: str | None = None) -> str | None:
    """One line for a connection refused by TLS, naming the server and what did not match;
    None when the failure is not TLS's."""
    for marker, what in _TLS_FAILURES:
        if marker in details:
            reason = details.rsplit("SSL_ERROR_SSL: ", 1)[-1].rstrip(": OK")[:160]
            line = what.format(trust=trust or "a CA you trust", reason=reason)
            return (
                f"cannot verify the appliance at {address}: {line}; give its CA with "
                "--certificate-authority FILE, $CSCTL_CA or `csctl config set-cluster` "
                "(`appliance serve` prints the CA's path)"
            )
    if trust.startswith("plaintext") and _PLAINTEXT_TO_TLS in details:
        return (
            f"the appliance at {address} closed the plaintext connection: it serves TLS; drop "
            "--insecure and give its CA with --certificate-authority FILE"
        )
    if identity is not None and _PLAINTEXT_TO_TLS in details and _AT_CONNECT in details:
        return client_certificate_refused(address, identity)
    return None


def client_certificate_refused(address: str, identity: str) -> str:
    """The line for a server that closed a verified TLS connection at once: under TLS 1.3 a
    server serving mutual TLS (`--tls-client-ca`) refuses a client certificate, or its absence,
    only after the client has finished its side of the handshake, and the client sees the
    socket closed."""
    if not identity:
        return (
            f"the appliance at {address} requires a client certificate: give "
            "--client-certificate/--client-key, $CSCTL_CLIENT_CERT/$CSCTL_CLIENT_KEY or "
            "`csctl config set-cluster --client-certificate FILE --client-key FILE`"
        )
    return (
        f"the appliance at {address} refused the client certificate {identity}: it is not "
        "signed by a CA the appliance trusts (its --tls-client-ca), or has expired"
    )
