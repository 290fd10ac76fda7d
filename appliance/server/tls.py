"""TLS on the coordinator's doors: one serving identity for gRPC, REST and the dashboard.

Given `tls_cert_file`/`tls_key_file`, those;
without, the coordinator's own CA (pki.py) signs a serving certificate for the addresses it
listens on plus `tls_names`. Either way the files are followed: a change on disk (a renewal
by cert-manager, an operator's `cp`) is served to new connections within RELOAD_SECONDS, by
both servers, with no restart; a certificate of the coordinator's own CA is renewed before
its end the same way. Plaintext only with `insecure`, and only on a loopback address.

With `tls_client_ca_file` the doors speak mutual TLS, as kube-apiserver's --client-ca-file: gRPC
requires a certificate of one of its CAs (or of the coordinator's own CA, which signs its
replicas' certificates) at the handshake; HTTPS asks for one and verifies one presented, and
client_certificates.py refuses every path but the probes' to a connection that presented none
(the kubelet's HTTPS probes present no certificate). The bundle is followed like the pair.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import socket
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from appliance.config.tls_fields import TlsSettings
from appliance.domain.auth import is_loopback
from appliance.server import pki
from appliance.server.pki import (
    CertificateAuthority,
    PkiError,
    check_pair,
    fingerprint,
    serving_files,
)

log = logging.getLogger(__name__)

RELOAD_SECONDS = 1.0


class TlsError(Exception):
    """TLS cannot be set up as configured; the message names the setting or file."""


def check_plaintext_allowed(host: str) -> None:
    """`insecure` serves tokens in the clear: only where nothing leaves the machine."""
    if not is_loopback(host):
        raise TlsError(
            f"insecure (plaintext) serving is allowed on a loopback address only, not {host!r}: "
            "listen on 127.0.0.1, or drop --insecure to serve TLS"
        )


def listen_names(host: str, extra: Sequence[str]) -> list[str]:
    """What the serving certificate is for: the listened-on address (every address of this
    machine for a wildcard), loopback and localhost, and the configured names."""
    names: list[str] = ["127.0.0.1", "::1", "localhost"]
    if host in ("", "0.0.0.0", "::", "[::]"):
        names.append(socket.gethostname())
        names.extend(_own_addresses())
    else:
        names.append(host.strip("[]"))
    names.extend(extra)
    return list(dict.fromkeys(names))


def _own_addresses() -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


@dataclasses.dataclass(frozen=True)
class _Material:
    """One checked certificate and key: the HTTP server's context and gRPC's configuration,
    both made from the same bytes."""

    context: ssl.SSLContext  # with the client CAs as its trust store, under mutual TLS
    grpc: grpc.ServerCertificateConfiguration
    stamps: tuple[tuple[int, int, int], ...]
    ends: datetime.datetime  # the certificate's not-after


class ServingTls:
    """The serving certificate and key as files, followed on disk. A change is taken only as a
    whole, checked pair: a half-copied file leaves the previous pair serving."""

    def __init__(self, settings: TlsSettings, host: str, dialled: str = "") -> None:
        """`dialled`: the address replicas dial (comma-separated), whose hosts it is for too."""
        self.settings = settings
        hosts = [a.strip().rpartition(":")[0].strip("[]") for a in dialled.split(",")]
        self.names = listen_names(host, [*settings.names, *(h for h in hosts if h)])
        self.ca: CertificateAuthority | None = None
        self.client_ca_file = settings.client_ca_file
        self._own_ca_pem = b""  # the replicas' CA, trusted beside the client CA bundle
        try:
            if settings.cert_file is None:
                self.ca = CertificateAuthority.load_or_create(settings.ca_dir)
                self.ca_pem = self.ca.cert_pem
                self.ca_file = self.ca.cert_path
            else:
                self.ca_file = settings.ca_file or settings.cert_file
                self.ca_pem = _last_certificate(_read(self.ca_file), self.ca_file)
            if self.client_ca_file is not None:
                own = self.ca or CertificateAuthority.load_or_create(settings.ca_dir)
                self._own_ca_pem = own.cert_pem
            self._locate()
            material = self._load()
        except (PkiError, OSError, ssl.SSLError, ValueError) as exc:
            raise TlsError(f"cannot serve TLS: {exc}") from None
        if material is None:
            raise TlsError(f"cannot serve TLS: {self.cert_file} changed while it was read")
        self._current = material
        self._lock = threading.Lock()
        self._version = 0
        # The HTTP server's own context only picks the current one for each handshake.
        self._front = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._front.minimum_version = ssl.TLSVersion.TLSv1_2
        self._front.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            # The verify mode is the front's (a handshake keeps it); the CAs a presented
            # certificate is verified by are the picked context's, so a changed bundle counts.
            self._front.verify_mode = ssl.CERT_OPTIONAL
            self._front.load_verify_locations(cadata=self._client_cas()[0].decode())
        self._front.sni_callback = self._pick

    def _locate(self) -> None:
        s = self.settings
        if self.ca is not None:
            self.cert_file, self.key_file = serving_files(self.ca, s.serving_dir, self.names)
        else:
            assert s.cert_file is not None and s.key_file is not None
            self.cert_file, self.key_file = s.cert_file, s.key_file

    @property
    def requires_client_certificate(self) -> bool:
        """Mutual TLS: callers present a certificate of a client CA."""
        return self.client_ca_file is not None

    def _client_cas(self) -> tuple[bytes, bytes]:
        """The CAs a caller's certificate may chain to (the bundle and our own), and the bundle
        as read (b"" without mutual TLS). Raises ValueError or OSError naming the setting."""
        if self.client_ca_file is None:
            return b"", b""
        bundle = read_client_cas(self.client_ca_file)
        return self._own_ca_pem + b"\n" + bundle, bundle

    @property
    def fingerprint(self) -> str:
        """The SHA-256 fingerprint of the CA clients pin."""
        return fingerprint(x509.load_pem_x509_certificate(self.ca_pem))

    def _load(self) -> _Material | None:
        """The pair on disk, checked (the key is the certificate's); None when a file changed
        while it was read. Raises ValueError, OSError or ssl.SSLError naming what is wrong."""
        stamps = self._stamp()
        cert_pem, key_pem = _read(self.cert_file), _read(self.key_file)
        check_pair(cert_pem, key_pem, self.cert_file, self.key_file)
        trusted, _ = self._client_cas()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if trusted:
            context.load_verify_locations(cadata=trusted.decode())
        if self._stamp() != stamps:  # replaced meanwhile: the context may hold the new one
            return None
        configuration = grpc.ssl_server_certificate_configuration(
            [(key_pem, cert_pem)], root_certificates=trusted or None
        )
        ends = x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
        return _Material(context, configuration, stamps, ends)

    # ---- the two servers ----------------------------------------------------------------------

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials that take a changed certificate at the next handshake."""
        served = [0]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            with self._lock:
                if served[0] == self._version:
                    return None
                served[0] = self._version
                return self._current.grpc

        return grpc.dynamic_ssl_server_credentials(
            self._current.grpc,
            fetch,
            require_client_authentication=self.requires_client_certificate,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The HTTP server's context: each handshake is given the current pair's context."""
        return self._front

    def _pick(self, connection: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        connection.context = self._current.context

    # ---- following the files ------------------------------------------------------------------

    def _files(self) -> list[Path]:
        return [self.cert_file, self.key_file, *filter(None, [self.client_ca_file])]

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(_stamp(path) for path in self._files())

    def refresh(self) -> bool:
        """Take changed files (or renew our own certificate); True if anything changed."""
        # Our own certificate is looked at again (and renewed) only near its end: not a
        # parse, a signature check and a lock every second.
        now = datetime.datetime.now(datetime.UTC)
        # A CA cert-manager renewed (pki.py's reload: four stats a second) signs a new one.
        if self.ca is not None and (
            self.ca.reload() or self._current.ends - now <= pki.RENEW_BEFORE
        ):
            self._locate()
        if self._stamp() == self._current.stamps:
            return False
        try:
            material = self._load()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("TLS files changed but cannot be used (%s); serving the previous ones", exc)
            return False
        if material is None:
            return False  # still being written: the next look takes it
        with self._lock:
            self._current = material
            self._version += 1
        log.info("TLS: serving the changed files %s", ", ".join(map(str, self._files())))
        return True

    async def follow(self) -> None:
        """Refresh every RELOAD_SECONDS, for the life of the servers; an error is logged and
        the previous pair keeps serving."""
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            try:
                await asyncio.to_thread(self.refresh)
            except Exception:
                log.exception("TLS: cannot look at the certificate files")


MAX_PEM_BYTES = 1 << 20


def _read(path: Path) -> bytes:
    """A PEM file, bounded; OSError naming it."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise OSError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"{path} is larger than {MAX_PEM_BYTES} bytes")
    return data


def _last_certificate(pem: bytes, path: Path) -> bytes:
    """The last certificate of a PEM chain (its CA's, for a chain that ends with it)."""
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{path} holds no PEM certificate") from None
    return chain[-1].public_bytes(serialization.Encoding.PEM)


def read_client_cas(path: Path) -> bytes:
    """A client CA bundle: one or more PEM certificates, each parsed, bounded; ValueError or
    OSError naming the setting and the file."""
    where = "tls_client_ca_file (--tls-client-ca)"
    try:
        pem = _read(path)
    except (OSError, ValueError) as exc:
        raise type(exc)(f"{where} {exc}") from None
    where = f"{where} {path}"
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{where} holds no PEM certificate, or a damaged one") from None
    if len(chain) > MAX_CLIENT_CAS:
        raise ValueError(f"{where} holds {len(chain)} certificates; at most {MAX_CLIENT_CAS}")
    return pem


MAX_CLIENT_CAS = 64


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        found = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (found.st_ino, found.st_size, found.st_mtime_ns)
