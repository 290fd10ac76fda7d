"""TLS on every door of a real coordinator: its own CA made once and kept, certificates given
and reloaded when they change on disk, and plaintext only on loopback."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import stat
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from appliance.client import ApplianceClient
from appliance.config import Settings
from appliance.domain.errors import Unavailable
from appliance.server.app import Coordinator, StartupError
from appliance.server.pki import CertificateAuthority, write_private
from tests.integration.coordinator.harness import serving, wait_until


def context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def served_serial(port: int, ca: Path) -> int:
    """The serial number of the certificate a port serves, verified against `ca`."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_its_own_ca_is_made_once_kept_and_pinned(tmp_path: Path) -> None:
    ca_dir = tmp_path / "ca"
    with serving(tmp_path / "data", tls_ca_dir=ca_dir) as running:
        ca = ca_dir / "ca.crt"
        assert stat.S_IMODE((ca_dir / "ca.key").stat().st_mode) == 0o600
        fingerprint = running.coordinator.tls.fingerprint  # type: ignore[union-attr]
        with ApplianceClient(running.address, ca=ca) as client:
            assert client.list_jobs() == []
        port = running.coordinator.http_port
        assert (
            httpx.get(f"https://127.0.0.1:{port}/healthz", verify=context(ca)).status_code == 200
        )
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ssl.create_default_context())
        with pytest.raises(Unavailable, match=r"not signed by the CA .*\(\$CSCTL_CA\)"):
            ApplianceClient(running.address, timeout=5).list_jobs()  # the session's CA
    with serving(tmp_path / "data", tls_ca_dir=ca_dir) as again:  # a restart keeps the CA
        assert again.coordinator.tls.fingerprint == fingerprint  # type: ignore[union-attr]
        with ApplianceClient(again.address, ca=ca) as client:
            assert client.list_jobs() == []


def test_given_certificates_are_served_and_followed_on_disk(tmp_path: Path) -> None:
    """A renewed certificate (cert-manager's, an operator's copy) reaches new connections of
    both servers without a restart; one that cannot be read keeps the old one serving."""
    ca = CertificateAuthority.load_or_create(tmp_path / "theirs")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def issue() -> int:
        issued = ca.issue("coordinator", ["127.0.0.1"])
        write_private(key, issued.key_pem)
        write_private(cert, issued.cert_pem)
        return issued.certificate.serial_number

    first = issue()
    with serving(tmp_path / "data", tls_cert_file=cert, tls_key_file=key) as running:
        grpc_port = int(running.address.rsplit(":", 1)[1])
        http_port = running.coordinator.http_port
        assert served_serial(grpc_port, ca.cert_path) == first
        assert served_serial(http_port, ca.cert_path) == first
        with ApplianceClient(running.address, ca=ca.cert_path) as client:
            client.list_jobs()
        second = issue()
        wait_until(lambda: served_serial(http_port, ca.cert_path) == second, 10, "https reload")
        wait_until(lambda: served_serial(grpc_port, ca.cert_path) == second, 10, "grpc reload")
        key.write_text("not a key")  # a half-done copy: the last good pair keeps serving
        cert.write_text("not a certificate")
        with ApplianceClient(running.address, ca=ca.cert_path) as client:
            client.list_jobs()
        assert served_serial(http_port, ca.cert_path) == second
        mismatched = ca.issue("coordinator", ["127.0.0.1"])  # its certificate, the old key
        write_private(cert, mismatched.cert_pem)
        write_private(key, b"")
        assert not running.coordinator.tls.refresh()  # type: ignore[union-attr]
        assert served_serial(http_port, ca.cert_path) == second
        assert served_serial(grpc_port, ca.cert_path) == second
        third = issue()
        wait_until(lambda: served_serial(http_port, ca.cert_path) == third, 10, "https reload")
        wait_until(lambda: served_serial(grpc_port, ca.cert_path) == third, 10, "grpc reload")


def test_a_certificate_for_another_name_is_one_line_saying_so(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "theirs")
    issued = ca.issue("coordinator", ["elsewhere.example"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_private(key, issued.key_pem)
    write_private(cert, issued.cert_pem)
    with serving(
        tmp_path / "data", tls_cert_file=cert, tls_key_file=key, tls_ca_file=ca.cert_path
    ) as running:
        with pytest.raises(Unavailable) as refused:
            ApplianceClient(running.address, ca=ca.cert_path, timeout=5).list_jobs()
        assert refused.value.message.startswith(
            f"cannot verify the appliance at {running.address}: its certificate is not for the "
            "name or address dialled"
        )


def test_plaintext_is_served_on_loopback_only(tmp_path: Path) -> None:
    with serving(tmp_path / "data", insecure=True) as running:
        assert running.coordinator.tls is None
        with ApplianceClient(running.address, insecure=True) as client:
            assert client.list_jobs() == []
        port = running.coordinator.http_port
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    wide = Settings(data_dir=tmp_path / "wide", host="0.0.0.0", grpc_port=0, http_port=0,
                    insecure=True)  # fmt: skip
    with pytest.raises(StartupError, match=r"loopback address only, not '0\.0\.0\.0'"):
        asyncio.run(Coordinator(wide).start())
    assert not (tmp_path / "wide" / "appliance.db").exists()  # refused before anything opened
    shutil.rmtree(tmp_path / "wide", ignore_errors=True)
