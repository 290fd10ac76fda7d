"""TLS on the coordinator's doors: one serving identity for gRPC, REST and the dashboard.

Given `tls_cert_file`/`tls_key_file`, those (and a client CA for mutual TLS, when given);
without, the coordinator's own CA (pki.py) signs a serving certificate for the addresses it
listens on plus `tls_names`. Either way the files are followed: a change on disk (a renewal
by cert-manager, an operator's `cp`) is served to new connections within RELOAD_SECONDS, by
both servers, with no restart; a certificate of the coordinator's own CA is renewed before
its end the same way. Plaintext only with `insecure`, and only on a loopback address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
from cryptography import x509

from appliance.config.tls_fields import TlsSettings
from appliance.server.pki import CertificateAuthority, PkiError, fingerprint, serving_files

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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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


class ServingTls:
    """The serving certificate, key and (optional) client CA as files, followed on disk."""

    def __init__(self, settings: TlsSettings, host: str, dialled: str = "") -> None:
        """`dialled`: the address replicas dial (comma-separated), whose hosts it is for too."""
        self.settings = settings
        hosts = [a.strip().rpartition(":")[0].strip("[]") for a in dialled.split(",")]
        self.names = listen_names(host, [*settings.names, *(h for h in hosts if h)])
        self.ca: CertificateAuthority | None = None
        try:
            if settings.cert_file is None:
                self.ca = CertificateAuthority.load_or_create(settings.ca_dir)
                self.ca_file = self.ca.cert_path
            else:
                self.ca_file = settings.ca_file or settings.cert_file
            self._locate()
            self._context = self._new_context()
        except (PkiError, OSError, ssl.SSLError, ValueError) as exc:
            raise TlsError(f"cannot serve TLS: {exc}") from None
        self._lock = threading.Lock()
        self._version = 0
        self._stamps = self._stamp()

    def _locate(self) -> None:
        s = self.settings
        if self.ca is not None:
            self.cert_file, self.key_file = serving_files(self.ca, s.serving_dir, self.names)
        else:
            assert s.cert_file is not None and s.key_file is not None
            self.cert_file, self.key_file = s.cert_file, s.key_file

    @property
    def ca_pem(self) -> bytes:
        """What a client (a replica) pins: the CA's certificate."""
        return self.ca_file.read_bytes()

    @property
    def fingerprint(self) -> str:
        return fingerprint(x509.load_pem_x509_certificate(self.ca_pem))

    # ---- the two servers ----------------------------------------------------------------------

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials that take a changed certificate at the next handshake."""
        served = [-1]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            with self._lock:
                if served[0] == self._version:
                    return None
                served[0] = self._version
            return self._grpc_configuration()

        return grpc.dynamic_ssl_server_credentials(
            self._grpc_configuration(),
            fetch,
            require_client_authentication=self.settings.client_ca_file is not None,
        )

    def _grpc_configuration(self) -> grpc.ServerCertificateConfiguration:
        client_ca = self.settings.client_ca_file
        return grpc.ssl_server_certificate_configuration(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=client_ca.read_bytes() if client_ca else None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The HTTP server's context: reloaded in place, so new connections get new files."""
        return self._context

    def _new_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.settings.client_ca_file is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.settings.client_ca_file)
        return context

    # ---- following the files ------------------------------------------------------------------

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        files = [self.cert_file, self.key_file, self.settings.client_ca_file]
        return tuple(_stamp(path) for path in files if path is not None)

    def refresh(self) -> bool:
        """Take changed files (or renew our own certificate); True if anything changed."""
        if self.ca is not None:
            self._locate()  # renews near its end, or for another CA
        stamps = self._stamp()
        if stamps == self._stamps:
            return False
        try:
            self._context.load_cert_chain(self.cert_file, self.key_file)
            if self.settings.client_ca_file is not None:
                self._context.load_verify_locations(self.settings.client_ca_file)
            self._grpc_configuration()  # readable as a whole before gRPC is told
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("TLS files changed but cannot be used (%s); serving the previous ones", exc)
            return False
        self._stamps = stamps
        with self._lock:
            self._version += 1
        log.info("TLS: serving the changed certificate %s", self.cert_file)
        return True

    async def follow(self) -> None:
        """Refresh every RELOAD_SECONDS, for the life of the servers."""
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            try:
                await asyncio.to_thread(self.refresh)
            except (PkiError, OSError) as exc:
                log.error("TLS: %s", exc)


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        found = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (found.st_ino, found.st_size, found.st_mtime_ns)
