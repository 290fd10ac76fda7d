"""How the user node reaches the coordinator: TLS verified by a CA, or plaintext when asked.

The CA a client pins, by precedence: the `ca` argument or csctl's `--certificate-authority`,
then $CSCTL_CA, then the current cluster's `certificate-authority` in csctl's config file
(`csctl config set-cluster`), else the system's CAs (a public certificate). Plaintext only when
asked for (`insecure`, `--insecure`, $CSCTL_INSECURE=1 or the cluster's `insecure: true`), and
only to a loopback address: a token sent in the clear must not leave the machine.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

import grpc

from appliance.client.user_config import ConfigError, current_cluster
from appliance.domain.auth import is_loopback

ENV_CA = "CSCTL_CA"
ENV_INSECURE = "CSCTL_INSECURE"
MAX_CA_BYTES = 1 << 20  # a CA bundle is a few KiB; refuse to read a device or a huge file


@dataclasses.dataclass(frozen=True)
class Trust:
    """The CA (PEM) a client verifies the server by, where it came from, or plaintext."""

    ca_pem: bytes | None = dataclasses.field(default=None, repr=False)
    source: str = ""
    insecure: bool = False

    def describe(self) -> str:
        if self.insecure:
            return "plaintext (insecure)"
        if self.ca_pem is None:
            return "the system's CAs (no --certificate-authority, $CSCTL_CA or cluster CA given)"
        return f"the CA {self.source}"


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    """A client certificate (chain) and its key, PEM, presented to a coordinator serving mutual
    TLS, and where they were given (client_identity.py resolves them)."""

    cert_pem: bytes
    key_pem: bytes = dataclasses.field(repr=False)
    source: str = ""


def resolve_trust(
    ca: str | Path | bytes | None, insecure: bool | None, environ: Mapping[str, str]
) -> Trust:
    """The trust a client uses, by precedence (argument, environment, config file)."""
    if insecure:
        return Trust(insecure=True, source="insecure")
    if isinstance(ca, bytes):
        return Trust(checked_pem(ca, "the ca argument"), "given to the client")
    if ca:
        return _read_ca(Path(ca), "--certificate-authority")
    if environ.get(ENV_CA):
        return _read_ca(Path(environ[ENV_CA]).expanduser(), f"${ENV_CA}")
    if insecure is None and environ.get(ENV_INSECURE, "").lower() in ("1", "true", "yes"):
        return Trust(insecure=True, source=f"${ENV_INSECURE}")
    cluster = current_cluster(environ)
    if cluster is not None:
        if cluster.insecure:
            return Trust(insecure=True, source=f"cluster {cluster.name}")
        if cluster.certificate_authority:
            where = f"cluster {cluster.name} in the config file"
            return _read_ca(Path(cluster.certificate_authority).expanduser(), where)
    return Trust()


def channel(
    address: str,
    trust: Trust,
    options: list[tuple[str, int]],
    identity: ClientIdentity | None = None,
) -> grpc.Channel:
    """A channel to `address` as `trust` says, presenting `identity` (mutual TLS); ConfigError
    for plaintext off the machine."""
    if trust.insecure:
        check_loopback(address)
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=trust.ca_pem,
        private_key=None if identity is None else identity.key_pem,
        certificate_chain=None if identity is None else identity.cert_pem,
    )
    return grpc.secure_channel(address, credentials, options=options)


def check_loopback(address: str) -> None:
    """Plaintext is allowed to a loopback address only."""
    if is_loopback(address):
        return
    raise ConfigError(
        f"insecure (plaintext) connections are allowed to a loopback address only, not "
        f"{address}: drop --insecure and give the server's CA with --certificate-authority"
    )


def _read_ca(path: Path, source: str) -> Trust:
    data = read_small_file(path, f"the CA file {path} ({source})")
    return Trust(checked_pem(data, f"the CA file {path} ({source})"), f"{path} ({source})")


def read_small_file(path: Path, what: str, private: bool = False) -> bytes:
    """A PEM file's bytes, up to MAX_CA_BYTES + 1 (the caller refuses more): a regular file,
    not blocking on a FIFO; with `private`, refused when others may read it. ConfigError
    naming `what`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise ConfigError(f"{what} is not a regular file")
        if private and found.st_mode & 0o007:
            raise ConfigError(f"{what} must not be readable by others: chmod 600 {path}")
        return f.read(MAX_CA_BYTES + 1)


def checked_pem(data: bytes, what: str) -> bytes:
    """`data` if it holds PEM certificates whose bodies decode (cheaply: csctl stays quick; gRPC
    checks the rest)."""
    if len(data) > MAX_CA_BYTES:
        raise ConfigError(
            f"{what} is larger than {MAX_CA_BYTES} bytes; a certificate is a few KiB"
        )
    bodies = _PEM.findall(data)
    if not bodies:
        raise ConfigError(f"{what} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    if not all(map(is_der, bodies)):
        raise ConfigError(f"{what} holds a damaged PEM certificate")
    return data


def is_der(body: bytes) -> bool:
    """Whether a PEM body is base64 of a DER SEQUENCE (what certificates and keys are)."""
    try:
        return base64.b64decode(b"".join(body.split()), validate=True).startswith(b"\x30")
    except binascii.Error:
        return False


_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)
