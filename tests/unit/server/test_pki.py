"""The coordinator's CA and the certificates it signs (server/pki.py)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from appliance.server.pki import (
    CA_CERT,
    CA_KEY,
    CertificateAuthority,
    PkiError,
    check_pair,
    serving_files,
    write_private,
)


def test_a_new_ca_is_made_private_and_kept(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    first = CertificateAuthority.load_or_create(directory)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / CA_KEY).stat().st_mode) == 0o600
    again = CertificateAuthority.load_or_create(directory)
    assert again.fingerprint == first.fingerprint  # outlives a restart
    constraints = first.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca


def test_a_serving_certificate_names_every_address_and_chains_to_the_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    cert_path, key_path = serving_files(ca, tmp_path / "serving", ["127.0.0.1", "svc.ns.svc"])
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert ca.signed(cert)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    # The same names: the same files; other names: a new certificate.
    assert serving_files(ca, tmp_path / "serving", ["svc.ns.svc", "127.0.0.1"]) == (
        cert_path,
        key_path,
    )
    assert serving_files(ca, tmp_path / "serving", ["10.0.0.1"])[0] != cert_path


def test_openssl_verifies_what_it_signs(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    cert_path, _ = serving_files(ca, tmp_path, ["localhost"])
    done = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca.cert_path), str(cert_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_serving_certificate_of_another_ca_is_replaced(tmp_path: Path) -> None:
    old = CertificateAuthority.load_or_create(tmp_path / "old")
    new = CertificateAuthority.load_or_create(tmp_path / "new")
    cert_path, _ = serving_files(old, tmp_path / "serving", ["localhost"])
    serving_files(new, tmp_path / "serving", ["localhost"])
    assert new.signed(x509.load_pem_x509_certificate(cert_path.read_bytes()))


def test_an_rsa_ca_made_elsewhere_signs_too(tmp_path: Path) -> None:
    """Helm's genCA and openssl's defaults make RSA CAs; a read-only dir (a Secret) is fine."""
    directory = tmp_path / "secret"
    directory.mkdir()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "elsewhere")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(1)
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (directory / CA_CERT).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    (directory / CA_KEY).write_bytes(key_pem)
    os.chmod(directory / CA_KEY, 0o440)
    os.chmod(directory, 0o500)
    try:
        ca = CertificateAuthority.load_or_create(directory)
        issued = ca.issue("x", ["localhost"])
        assert ca.signed(issued.certificate)
    finally:
        os.chmod(directory, 0o700)


def test_a_ca_key_others_can_read_is_refused(tmp_path: Path) -> None:
    CertificateAuthority.load_or_create(tmp_path)
    os.chmod(tmp_path / CA_KEY, 0o644)
    with pytest.raises(PkiError, match="not be readable by others"):
        CertificateAuthority.load_or_create(tmp_path)


def test_a_damaged_ca_is_one_line_naming_the_dir(tmp_path: Path) -> None:
    CertificateAuthority.load_or_create(tmp_path)
    (tmp_path / CA_CERT).write_text("not a certificate")
    with pytest.raises(PkiError, match=str(tmp_path)):
        CertificateAuthority.load_or_create(tmp_path)


def test_a_renewal_cut_short_is_made_again(tmp_path: Path) -> None:
    """The key was written, the certificate not: the pair does not match, so it is issued
    again instead of failing every start."""
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    cert_path, key_path = serving_files(ca, tmp_path / "serving", ["localhost"])
    write_private(key_path, ca.issue("other", ["localhost"]).key_pem)
    serving_files(ca, tmp_path / "serving", ["localhost"])
    check_pair(cert_path.read_bytes(), key_path.read_bytes(), cert_path, key_path)
    with pytest.raises(ValueError, match="is not the key of the certificate"):
        check_pair(cert_path.read_bytes(), ca.issue("x").key_pem, cert_path, key_path)
