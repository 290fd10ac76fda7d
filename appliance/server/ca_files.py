"""Reading the coordinator's CA from its dir (pki.py signs with it), checked.

Two layouts. Ours: `ca.crt` (self-signed; what clients pin) and `ca.key`, made by `appliance
serve` or Helm's genCA. A kubernetes.io/tls Secret's, as cert-manager writes it for a
Certificate with `isCA: true` (the chart's tls.certManager): `tls.crt` (the signing CA, then
any CA above it), `tls.key`, and `ca.crt`, the root clients pin (without it, tls.crt's last
certificate). Either way the key must be the certificate's and not readable by others, the
certificate a CA's, and the chain must lead to the pinned root.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

CA_CERT, CA_KEY = "ca.crt", "ca.key"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"  # a kubernetes.io/tls Secret's (cert-manager's)
# Ours are ECDSA; a CA made elsewhere (Helm's genCA, openssl's default) may be RSA.
SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
Stamps = tuple[tuple[int, int, int], ...]
PEM = serialization.Encoding.PEM


class PkiError(Exception):
    """A CA or certificate that cannot be made or used; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Signer:
    """One CA as read from its files: swapped whole when they change (no lock: one reference)."""

    cert: x509.Certificate  # the signing CA's
    key: SigningKey = dataclasses.field(repr=False)
    root_pem: bytes  # what clients pin: the signing CA itself, or the root above it
    chain_pem: bytes  # the signing CA and those up to the root (not it), sent with what it signs
    stamps: Stamps


def issued_elsewhere(directory: Path) -> bool:
    """Whether `directory` holds a kubernetes.io/tls Secret's files (cert-manager's)."""
    return (directory / TLS_CERT).exists()


def pinned_path(directory: Path) -> Path:
    """The file holding the certificate clients pin."""
    if issued_elsewhere(directory) and not (directory / CA_CERT).exists():
        return directory / TLS_CERT  # its last certificate, then
    return directory / CA_CERT


def stamps(directory: Path) -> Stamps:
    """What changes when any of the CA's files is replaced (the kubelet swaps them in whole)."""
    found = []
    for name in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY):
        try:
            stat = os.stat(directory / name)  # through the kubelet's symlinks
        except OSError:
            found.append((0, 0, 0))
        else:
            found.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def read_signer(directory: Path) -> Signer:
    """The CA in `directory`, checked; PkiError naming the file, OSError if one is missing."""
    before = stamps(directory)
    elsewhere = issued_elsewhere(directory)
    cert_path = directory / (TLS_CERT if elsewhere else CA_CERT)
    key_path = directory / (TLS_KEY if elsewhere else CA_KEY)
    try:
        cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
        check_pair(cert_pem, key_pem, cert_path, key_path)
        chain = x509.load_pem_x509_certificates(cert_pem)
        root_path = directory / CA_CERT
        root = (
            x509.load_pem_x509_certificates(root_path.read_bytes())[0]
            if elsewhere and root_path.exists()
            else chain[-1]
        )
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as exc:
        raise PkiError(f"cannot read the CA in {directory}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise PkiError(f"{key_path}: the CA's key must be an ECDSA or RSA key")
    if os.stat(key_path).st_mode & 0o007:  # a Secret's mount may give its group (fsGroup)
        raise PkiError(f"{key_path}: the CA's key must not be readable by others (0600)")
    if _constraints(chain[0]) is None:
        raise PkiError(
            f"{cert_path}: not a CA's certificate (basicConstraints CA:TRUE; with cert-manager, "
            "isCA: true): the coordinator signs its own and its replicas' certificates with it"
        )
    sent = [c for c in chain if c != root]
    _check_path(cert_path, [*sent, root])
    return Signer(
        chain[0], key, root.public_bytes(PEM), b"".join(c.public_bytes(PEM) for c in sent), before
    )


def _check_path(cert_path: Path, path: list[x509.Certificate]) -> None:
    """Each CA of `path` (the signing one first, the root last) signed by the next, whose path
    length allows the CAs beneath it (a root of `appliance serve` allows none)."""
    for below, (lower, upper) in enumerate(itertools.pairwise(path), start=1):
        if not issued_by(lower, upper):
            raise PkiError(
                f"{cert_path}: {lower.subject.rfc4514_string()} is not signed by "
                f"{upper.subject.rfc4514_string()}, the next CA up (the root from {CA_CERT})"
            )
        constraints = _constraints(upper)
        if constraints is None or (
            constraints.path_length is not None and constraints.path_length < below
        ):
            raise PkiError(
                f"{cert_path}: {upper.subject.rfc4514_string()} may not sign a CA "
                f"(path length {constraints.path_length if constraints else 'none, not a CA'}), "
                "so clients would refuse what the coordinator signs: sign it with a CA that may"
            )


def _constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    """A CA's basic constraints; None for a certificate that is not a CA's."""
    try:
        found = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None
    return found if found.ca else None


def issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether `issuer`'s key signed `cert`."""
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def check_pair(cert_pem: bytes, key_pem: bytes, cert_path: Path, key_path: Path) -> None:
    """ValueError naming the files unless `key_pem` is the key of `cert_pem`'s first
    certificate (a copy cut short, or a key and certificate of two renewals)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise ValueError(f"{cert_path} holds no PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{key_path} holds no unencrypted PEM private key") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    mine = key.public_key().public_bytes(serialization.Encoding.DER, public)
    if mine != cert.public_key().public_bytes(serialization.Encoding.DER, public):
        raise ValueError(f"{key_path} is not the key of the certificate in {cert_path}")
