"""The coordinator's certificate authority and the certificates it signs (cryptography's X.509).

Without certificates given, `appliance serve` makes a CA in its CA dir on first start (as k3s
and kubeadm do): `ca.crt` (public; what clients pin) and `ca.key` (mode 0600, in a 0700 dir),
kept across restarts, and shared by the coordinators of one cluster when their CA dir is.
Keys are ECDSA P-256: small, and quick to make and to verify.

Or the CA dir holds a kubernetes.io/tls Secret's files, as cert-manager writes them for a
Certificate with `isCA: true` (the chart's tls.certManager): `tls.crt` (the signing CA, then
any CA above it), `tls.key`, and `ca.crt` (the root clients pin). The coordinator then signs
with an intermediate: what it signs is sent with tls.crt's chain, and a renewal (a new key and
certificate the kubelet swaps in at once) is taken without a restart (`reload`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import ipaddress
import logging
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from appliance.server.ca_files import (
    CA_CERT,
    CA_KEY,
    TLS_CERT,
    TLS_KEY,
    PkiError,
    Signer,
    Stamps,
    check_pair,
    issued_by,
    issued_elsewhere,
    pinned_path,
    read_signer,
    stamps,
)

# Read from the CA's files in ca_files.py; named here too, where callers look.
__all__ = [
    "CA_CERT", "CA_KEY", "TLS_CERT", "TLS_KEY", "CertificateAuthority", "Issued", "PkiError",
    "check_pair", "fingerprint", "serving_files", "write_private",
]  # fmt: skip

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)  # a serving certificate closer to its end is renewed
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Issued:
    """A certificate and its key, PEM."""

    cert_pem: bytes
    key_pem: bytes = dataclasses.field(repr=False)

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


class CertificateAuthority:
    """A CA certificate and its key, signing certificates for names and addresses."""

    def __init__(self, signer: Signer, directory: Path, cert_path: Path) -> None:
        self._signer, self.directory, self.cert_path = signer, directory, cert_path
        self._refused: Stamps = ()

    @property
    def cert(self) -> x509.Certificate:
        """The signing CA's certificate."""
        return self._signer.cert

    @property
    def cert_pem(self) -> bytes:
        """The certificate clients pin (`cert_path`): the root of what this CA signs."""
        return self._signer.root_pem

    @property
    def fingerprint(self) -> str:
        return fingerprint(x509.load_pem_x509_certificate(self.cert_pem))

    @classmethod
    def load_or_create(cls, directory: Path) -> CertificateAuthority:
        """The CA in `directory`, made there first if it is not (under a lock, so two
        coordinators starting on one shared dir make one CA)."""
        try:
            if not issued_elsewhere(directory) and not (directory / CA_CERT).exists():
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # else read-only, maybe
                with _locked(directory / ".lock"):
                    if not (directory / CA_CERT).exists():
                        _create_ca(directory)
            signer = read_signer(directory)
        except OSError as exc:
            raise PkiError(f"cannot use the CA in {directory}: {exc.strerror or exc}") from None
        return cls(signer, directory, pinned_path(directory))

    def reload(self) -> bool:
        """Take the CA's files again if they changed on disk (cert-manager renewed it); True
        when they were taken. Files that cannot be used are logged once and the previous CA
        keeps signing; files changing while read are left to the next call."""
        before = stamps(self.directory)
        if before in (self._signer.stamps, self._refused):
            return False
        try:
            signer = read_signer(self.directory)
        except (PkiError, OSError) as exc:
            if stamps(self.directory) == before:  # not a swap under way: refused as they are
                self._refused = before
                log.error(
                    "the CA in %s changed but cannot be used (%s); keeping the previous one",
                    self.directory,
                    exc,
                )
            return False
        if signer.stamps != before or stamps(self.directory) != before:
            return False
        self._signer = signer
        self.cert_path = pinned_path(self.directory)
        log.info("the CA in %s changed: signing with %s", self.directory, fingerprint(signer.cert))
        return True

    def issue(
        self,
        common_name: str,
        names: Sequence[str] = (),
        *,
        days: int = SERVING_DAYS,
        server: bool = True,
        client: bool = False,
    ) -> Issued:
        """A new key and a certificate for it, valid for `days`, for DNS names and IP
        addresses `names`, usable by a server and/or a client; followed by the CAs between
        this one and the root, if any (so a peer that pins the root can verify it)."""
        signer = self._signer
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ] * client
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(signer.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little apart
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False
            )
        cert = builder.sign(signer.key, hashes.SHA256())
        pem = cert.public_bytes(serialization.Encoding.PEM) + signer.chain_pem
        return Issued(pem, _key_pem(key))

    def signed(self, cert: x509.Certificate) -> bool:
        """Whether `cert` was signed by this CA's key."""
        return issued_by(cert, self.cert)


def fingerprint(cert: x509.Certificate) -> str:
    """SHA256:AB:CD:... as `openssl x509 -fingerprint -sha256` shows it."""
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    return "SHA256:" + ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def serving_files(
    ca: CertificateAuthority, directory: Path, names: Sequence[str]
) -> tuple[Path, Path]:
    """The serving certificate and key for `names` in `directory` (issued by `ca` and written
    0600 when missing, for other names, by another CA, or within RENEW_BEFORE of their end)."""
    tag = hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()[:12]
    cert_path, key_path = directory / f"serving-{tag}.crt", directory / f"serving-{tag}.key"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(directory / ".lock"):
        if not _current(ca, cert_path, key_path, names):
            issued = ca.issue("appliance coordinator", names)
            write_private(key_path, issued.key_pem)
            write_private(cert_path, issued.cert_pem + ca.cert_pem)  # the chain, as k3s serves
    return cert_path, key_path


def _current(
    ca: CertificateAuthority, cert_path: Path, key_path: Path, names: Sequence[str]
) -> bool:
    try:
        cert_pem = cert_path.read_bytes()
        check_pair(cert_pem, key_path.read_bytes(), cert_path, key_path)  # a renewal cut short
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (OSError, ValueError):
        return False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    wanted = {_general_name(n) for n in names}
    ends = cert.not_valid_after_utc
    return ca.signed(cert) and set(sans) == wanted and ends - _now() > RENEW_BEFORE


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole (under another name, then renamed), mode 0600."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(partial, path)


def _create_ca(directory: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"appliance CA {secrets.token_hex(4)}")]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(directory / CA_KEY, _key_pem(key))  # the key first: a CA file means a whole CA
    write_private(directory / CA_CERT, cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(directory / CA_CERT, 0o644)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
