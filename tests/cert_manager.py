"""cert-manager's part, played by the tests at our seam: what its controller writes for the
chart's CA Certificate (isCA: true) is a kubernetes.io/tls Secret, `tls.crt` (the new CA, then
the CAs above it but the root), `tls.key` and `ca.crt` (the root); here a root the test holds
signs it. `mount` writes those files as the kubelet does (a timestamped dir behind the `..data`
symlink, swapped whole), so a renewal is seen as the coordinator would see it. `crds` are
cert-manager's own CustomResourceDefinitions, fetched from its Go module."""

from __future__ import annotations

import datetime
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance.server.pki import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY
from tests.kube.cluster import REPO, CannotRun

PEM = serialization.Encoding.PEM
FETCH_CRDS = REPO / "deploy" / "tools" / "fetch-cert-manager-crds.sh"


def crds() -> list[dict[str, Any]]:
    """cert-manager's CRDs of Certificate, Issuer and ClusterIssuer, as the API server takes
    them (the chart-template labels they carry dropped); CannotRun saying why they cannot be
    had."""
    done = subprocess.run(
        ["bash", str(FETCH_CRDS)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise CannotRun(f"deploy/tools/fetch-cert-manager-crds.sh: {done.stderr.strip()}")
    found = []
    for path in sorted(Path(done.stdout.strip().splitlines()[-1]).glob("crd-*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crd["metadata"] = {"name": crd["metadata"]["name"]}
        found.append(crd)
    return found


def schema(crds: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The OpenAPI v3 schema of `kind`'s served version v1."""
    (crd,) = [c for c in crds if c["spec"]["names"]["kind"] == kind]
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def make_root(directory: Path, name: str = "test root CA") -> Path:
    """A self-signed root in `directory` (ca.crt, ca.key), with no path length limit: the chart's
    selfSigned root Certificate, or a site's own CA, which sign the coordinator's CA."""
    directory.mkdir(mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _sign(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key, key, 3650)
    (directory / CA_CERT).write_bytes(cert.public_bytes(PEM))
    (directory / CA_KEY).write_bytes(_key_pem(key))
    os.chmod(directory / CA_KEY, 0o600)
    return directory


def issue_ca(root_dir: Path, name: str, *, ca: bool = True, days: int = 90) -> dict[str, bytes]:
    """The Secret's data: a CA named `name` (ECDSA P-256, as the chart asks) signed by the CA
    in `root_dir` (its ca.crt and ca.key); `ca=False` gives a leaf, as a misconfigured
    Certificate would."""
    root_pem = (root_dir / CA_CERT).read_bytes()
    root = x509.load_pem_x509_certificate(root_pem)
    root_key = serialization.load_pem_private_key((root_dir / CA_KEY).read_bytes(), None)
    assert isinstance(root_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = _sign(subject, key, root_key, days, issuer=root.subject, ca=ca)
    return {TLS_CERT: cert.public_bytes(PEM), TLS_KEY: _key_pem(key), CA_CERT: root_pem}


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _sign(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    signer: ec.EllipticCurvePrivateKey,
    days: int,
    *,
    issuer: x509.Name | None = None,
    ca: bool = True,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(_usage(ca), critical=True)
        .sign(signer, hashes.SHA256())
    )


def mount(directory: Path, data: dict[str, bytes]) -> None:
    """Write the Secret's files into `directory` as the kubelet's atomic writer does (tls.key
    0440, as the chart projects it), replacing the previous ones in one rename."""
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    version = directory / f"..{secrets.token_hex(4)}"
    version.mkdir()
    for name, content in data.items():
        (version / name).write_bytes(content)
        os.chmod(version / name, 0o440 if name == TLS_KEY else 0o444)
    swap = directory / "..data_tmp"
    swap.symlink_to(version.name)
    os.replace(swap, directory / "..data")
    for name in data:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def _usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
        key_encipherment=not ca, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
