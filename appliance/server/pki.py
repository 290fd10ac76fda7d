"""The coordinator's certificate authority and the certificates it signs (cryptography's X.509).

Without certificates given, `appliance serve` makes a CA in its CA dir on first start (as k3s
and kubeadm do): `ca.crt` (public; what clients pin) and `ca.key` (mode 0600, in a 0700 dir),
kept across restarts, and shared by the coordinators of one cluster when their CA dir is.
Keys are ECDSA P-256: small, and quick to make and to verify.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)  # a serving certificate closer to its end is renewed
CA_CERT, CA_KEY = "ca.crt", "ca.key"
# Ours are ECDSA; a CA made elsewhere (Helm's genCA, openssl's default) may be RSA.
SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class PkiError(Exception):
    """A CA or certificate that cannot be made or used; the message names the file."""


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

    def __init__(self, cert: x509.Certificate, key: SigningKey, path: Path) -> None:
        self.cert, self._key, self.cert_path = cert, key, path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cert)

    @classmethod
    def load_or_create(cls, directory: Path) -> CertificateAuthority:
        """The CA in `directory`, made there first if it is not (under a lock, so two
        coordinators starting on one shared dir make one CA)."""
        try:
            if not (directory / CA_CERT).exists():  # else it may be read-only (a Secret)
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                with _locked(directory / ".lock"):
                    if not (directory / CA_CERT).exists():
                        _create_ca(directory)
            return cls._load(directory)
        except OSError as exc:
            raise PkiError(f"cannot use the CA in {directory}: {exc.strerror or exc}") from None

    @classmethod
    def _load(cls, directory: Path) -> CertificateAuthority:
        cert_path, key_path = directory / CA_CERT, directory / CA_KEY
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except ValueError as exc:
            raise PkiError(f"cannot read the CA in {directory}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise PkiError(f"{key_path}: the CA's key must be an ECDSA or RSA key")
        if os.stat(key_path).st_mode & 0o007:  # a Secret's mount may give its group (fsGroup)
            raise PkiError(f"{key_path}: the CA's key must not be readable by others (0600)")
        return cls(cert, key, cert_path)

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
        addresses `names`, usable by a server and/or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ] * client
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little apart
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def signed(self, cert: x509.Certificate) -> bool:
        """Whether `cert` was signed by this CA's key."""
        try:
            cert.verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


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
