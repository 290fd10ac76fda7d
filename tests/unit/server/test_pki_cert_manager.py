"""The coordinator's CA as cert-manager writes it (a kubernetes.io/tls Secret of a Certificate
with isCA: true, mounted as the CA dir): it signs under the root clients pin, is checked as
our own is, and a renewal is taken without a restart (server/pki.py, server/tls.py)."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from appliance.config.tls_fields import TlsSettings
from appliance.server.pki import CA_CERT, TLS_CERT, TLS_KEY, CertificateAuthority, PkiError
from appliance.server.tls import ServingTls
from tests.cert_manager import issue_ca, make_root, mount


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "root")


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> None:
    """A real TLS handshake between the two contexts; raises what the client's check raises."""
    ours, theirs = socket.socketpair()
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(theirs, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError) as exc:
            failed.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(ours, server_hostname=name) as tls:
            tls.sendall(b"x")
    finally:
        thread.join(10)
    assert not failed, failed


def _files(tmp_path: Path, name: str, pem: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(pem)
    return path


def test_an_intermediate_from_cert_manager_signs_under_the_root_clients_pin(
    tmp_path: Path, root: Path
) -> None:
    secret = tmp_path / "secret"
    mount(secret, issue_ca(root, "appliance CA"))
    os.chmod(secret, 0o555)  # a Secret's mount: nothing is written there
    ca = CertificateAuthority.load_or_create(secret)
    assert ca.cert_pem == (root / CA_CERT).read_bytes()  # clients pin the root, not tls.crt
    assert ca.cert_path == secret / CA_CERT
    assert ca.cert.subject.rfc4514_string() == "CN=appliance CA"
    # The serving certificate goes out with the intermediate: a client pinning the root only
    # verifies it (no partial chains).
    tls = ServingTls(TlsSettings(ca_dir=secret, serving_dir=tmp_path / "serving"), "127.0.0.1")
    client = ssl.create_default_context(cafile=str(root / CA_CERT))
    _handshake(tls.ssl_context(), client, "127.0.0.1")
    assert tls.ca_pem == (root / CA_CERT).read_bytes()
    # Two replicas' certificates (leaf and intermediate) verify each other by the root alone.
    one, two = ca.issue("a", ["a"], client=True), ca.issue("b", ["b"], client=True)
    assert len(x509.load_pem_x509_certificates(one.cert_pem)) == 2
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(_files(tmp_path, "a.crt", one.cert_pem), _key(tmp_path, "a", one))
    server.load_verify_locations(cafile=str(root / CA_CERT))
    server.verify_mode = ssl.CERT_REQUIRED
    peer = ssl.create_default_context(cafile=str(root / CA_CERT))
    peer.load_cert_chain(_files(tmp_path, "b.crt", two.cert_pem), _key(tmp_path, "b", two))
    _handshake(server, peer, "a")


def _key(tmp_path: Path, name: str, issued: object) -> Path:
    path = tmp_path / f"{name}.key"
    path.write_bytes(issued.key_pem)  # type: ignore[attr-defined]
    return path


def test_a_renewal_is_signed_with_and_served_without_a_restart(tmp_path: Path, root: Path) -> None:
    secret = tmp_path / "secret"
    mount(secret, issue_ca(root, "appliance CA 1"))
    tls = ServingTls(TlsSettings(ca_dir=secret, serving_dir=tmp_path / "serving"), "127.0.0.1")
    assert tls.ca is not None
    assert not tls.refresh()  # nothing changed: nothing taken
    first = tls.cert_file.read_bytes()
    mount(secret, issue_ca(root, "appliance CA 2"))  # cert-manager renewed it: a new key
    assert tls.refresh()
    served = x509.load_pem_x509_certificates(tls.cert_file.read_bytes())
    assert tls.cert_file.read_bytes() != first
    assert served[0].issuer.rfc4514_string() == "CN=appliance CA 2"
    assert served[1].subject.rfc4514_string() == "CN=appliance CA 2"
    assert tls.ca.signed(tls.ca.issue("r", ["r"]).certificate)
    client = ssl.create_default_context(cafile=str(root / CA_CERT))
    _handshake(tls.ssl_context(), client, "127.0.0.1")


def test_a_renewal_that_cannot_be_used_leaves_the_previous_ca_signing(
    tmp_path: Path, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret"
    good = issue_ca(root, "appliance CA 1")
    mount(secret, good)
    ca = CertificateAuthority.load_or_create(secret)
    mount(secret, {**good, TLS_KEY: issue_ca(root, "other")[TLS_KEY]})  # a mismatched pair
    assert not ca.reload()
    assert not ca.reload()  # refused once, logged once
    assert caplog.text.count("cannot be used") == 1
    assert "is not the key of the certificate" in caplog.text
    assert ca.cert.subject.rfc4514_string() == "CN=appliance CA 1"
    mount(secret, issue_ca(root, "appliance CA 2"))
    assert ca.reload()
    assert ca.cert.subject.rfc4514_string() == "CN=appliance CA 2"


def test_a_leaf_certificate_is_refused_naming_is_ca(tmp_path: Path, root: Path) -> None:
    """A Certificate without isCA: true cannot sign the coordinator's and replicas' own."""
    mount(tmp_path / "secret", issue_ca(root, "a serving certificate", ca=False))
    with pytest.raises(PkiError, match=r"tls\.crt: not a CA's certificate .*isCA: true"):
        CertificateAuthority.load_or_create(tmp_path / "secret")


def test_a_root_that_did_not_sign_it_is_refused(tmp_path: Path, root: Path) -> None:
    other = tmp_path / "other"
    CertificateAuthority.load_or_create(other)
    data = issue_ca(root, "appliance CA")
    mount(tmp_path / "secret", {**data, CA_CERT: (other / CA_CERT).read_bytes()})
    with pytest.raises(PkiError, match=r"CN=appliance CA is not signed by CN=appliance CA "):
        CertificateAuthority.load_or_create(tmp_path / "secret")


def test_its_key_readable_by_others_is_refused(tmp_path: Path, root: Path) -> None:
    mount(tmp_path / "secret", issue_ca(root, "appliance CA"))
    os.chmod((tmp_path / "secret" / TLS_KEY).resolve(), 0o444)
    with pytest.raises(PkiError, match=r"tls\.key: the CA's key must not be readable by others"):
        CertificateAuthority.load_or_create(tmp_path / "secret")


def test_without_ca_crt_the_last_certificate_of_tls_crt_is_pinned(
    tmp_path: Path, root: Path
) -> None:
    data = issue_ca(root, "appliance CA")
    mount(tmp_path / "secret", {TLS_CERT: data[TLS_CERT] + data[CA_CERT], TLS_KEY: data[TLS_KEY]})
    ca = CertificateAuthority.load_or_create(tmp_path / "secret")
    assert ca.cert_pem == data[CA_CERT]
    assert ca.cert_path == tmp_path / "secret" / TLS_CERT
    assert len(x509.load_pem_x509_certificates(ca.issue("x").cert_pem)) == 2  # not the root


def test_a_root_that_may_sign_no_ca_is_refused(tmp_path: Path) -> None:
    """`appliance serve`'s own CA (path length 0) cannot be the root of the coordinator's CA:
    clients would refuse every certificate it signs."""
    ours = tmp_path / "ours"
    CertificateAuthority.load_or_create(ours)
    mount(tmp_path / "secret", issue_ca(ours, "appliance CA"))
    with pytest.raises(PkiError, match=r"may not sign a CA \(path length 0\)"):
        CertificateAuthority.load_or_create(tmp_path / "secret")
