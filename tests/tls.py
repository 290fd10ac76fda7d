"""TLS for the suite's own servers (fakes at our seams): a serving certificate from the session's
CA (tests/conftest.py `test_ca`), which every client of the suite pins."""

from __future__ import annotations

import functools
import os
import ssl
import tempfile
from pathlib import Path

import grpc

from appliance.server.pki import CertificateAuthority, Issued


@functools.cache
def _issued(ca_dir: str) -> Issued:
    ca = CertificateAuthority.load_or_create(Path(ca_dir))
    return ca.issue("test server", ["127.0.0.1", "::1", "localhost"])


def server_credentials() -> grpc.ServerCredentials:
    """What a fake gRPC server of a test serves: a certificate the session's clients trust."""
    issued = _issued(os.environ["APPLIANCE_TLS_CA_DIR"])
    return grpc.ssl_server_credentials([(issued.key_pem, issued.cert_pem)])


def _trusted() -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(Path(os.environ["CSCTL_CA"]).read_bytes())


def secure_channel(address: str, **kwargs: object) -> grpc.Channel:
    """A raw channel to a coordinator, verifying it as the suite's clients do."""
    return grpc.secure_channel(address, _trusted(), **kwargs)


def secure_aio_channel(address: str, **kwargs: object) -> grpc.aio.Channel:
    """An asyncio channel to a coordinator, verifying it as the suite's clients do."""
    return grpc.aio.secure_channel(address, _trusted(), **kwargs)


def server_ssl_context() -> ssl.SSLContext:
    """The same certificate for a fake HTTPS server of a test (an OIDC issuer's JWKS URL)."""
    issued = _issued(os.environ["APPLIANCE_TLS_CA_DIR"])
    folder = Path(tempfile.mkdtemp(prefix="test-server-tls-"))
    (folder / "cert.pem").write_bytes(issued.cert_pem)
    (folder / "key.pem").write_bytes(issued.key_pem)
    (folder / "key.pem").chmod(0o600)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context
