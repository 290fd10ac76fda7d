"""The certificate a client presents to a coordinator that serves mutual TLS.

A coordinator started with `--tls-client-ca` serves only callers presenting a certificate of one
of those CAs (as kube-apiserver with --client-ca-file and kubectl's --client-certificate and
--client-key). The pair a client presents, by precedence as its CA (tls.py): the `client_cert`
and `client_key` arguments or csctl's `--client-certificate`/`--client-key`, then
$CSCTL_CLIENT_CERT/$CSCTL_CLIENT_KEY, then the current cluster's `client-certificate` and
`client-key` in csctl's config file (`csctl config set-cluster`); else none. A certificate goes
with its key at each of these places; the key must not be readable by others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from appliance.client.tls import (
    MAX_CA_BYTES,
    ClientIdentity,
    checked_pem,
    is_der,
    read_small_file,
)
from appliance.client.user_config import ConfigError, current_cluster

ENV_CLIENT_CERT = "CSCTL_CLIENT_CERT"
ENV_CLIENT_KEY = "CSCTL_CLIENT_KEY"
FLAGS = ("--client-certificate", "--client-key")


def resolve_identity(
    cert: str | Path | None, key: str | Path | None, environ: Mapping[str, str]
) -> ClientIdentity | None:
    """The pair a client presents, by precedence (arguments, environment, config file); None
    for none. ConfigError naming the field for half a pair or a file that is not usable."""
    if cert or key:
        return _pair(cert, key, FLAGS, "")
    if environ.get(ENV_CLIENT_CERT) or environ.get(ENV_CLIENT_KEY):
        names = (f"${ENV_CLIENT_CERT}", f"${ENV_CLIENT_KEY}")
        return _pair(environ.get(ENV_CLIENT_CERT), environ.get(ENV_CLIENT_KEY), names, "")
    cluster = current_cluster(environ)
    if cluster is not None and (cluster.client_certificate or cluster.client_key):
        names = ("client-certificate", "client-key")
        where = f" of cluster {cluster.name} in the config file"
        return _pair(cluster.client_certificate, cluster.client_key, names, where)
    return None


def _pair(
    cert: str | Path | None, key: str | Path | None, names: tuple[str, str], where: str
) -> ClientIdentity:
    if not cert or not key:
        given, missing = names if cert else names[::-1]
        raise ConfigError(f"{given}{where} is given without {missing}: give both or neither")
    cert_path, key_path = Path(cert).expanduser(), Path(key).expanduser()
    what = f"the client certificate {cert_path} ({names[0]}{where})"
    cert_pem = checked_pem(read_small_file(cert_path, what), what)
    what = f"the client key {key_path} ({names[1]}{where})"
    key_pem = checked_key(read_small_file(key_path, what, private=True), what)
    return ClientIdentity(cert_pem, key_pem, f"{cert_path} ({names[0]}{where})")


def checked_key(data: bytes, what: str) -> bytes:
    """`data` if it holds one unencrypted PEM private key whose body decodes (cheaply, as
    checked_pem; gRPC checks that it is the certificate's at the handshake)."""
    if len(data) > MAX_CA_BYTES:
        raise ConfigError(f"{what} is larger than {MAX_CA_BYTES} bytes; a key is a few KiB")
    if b"ENCRYPTED PRIVATE KEY" in data or b"Proc-Type: 4,ENCRYPTED" in data:
        raise ConfigError(f"{what} is encrypted; give it unencrypted (mode 0600)")
    found = _KEY.search(data)
    if found is None:
        raise ConfigError(f"{what} holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
    if not is_der(found.group(2)):
        raise ConfigError(f"{what} holds a damaged PEM private key")
    return data


_KEY = re.compile(rb"-----BEGIN ((?:RSA |EC )?PRIVATE KEY)-----(.*?)-----END \1-----", re.S)
