"""The chart's TLS: a CA made at install that the coordinator can sign with, mounted where the
coordinator looks, its serving certificate for the Service's names."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from appliance.server.pki import CertificateAuthority
from tests.deploy.chart import NAMESPACE, Helm, Rendered


def test_the_ca_made_at_install_signs_for_the_service(
    rendered: dict[str, Rendered], tmp_path: Path
) -> None:
    r = rendered["default"]
    secret = r.one("Secret", "-tls-ca")
    ca_dir = tmp_path / "tls"
    ca_dir.mkdir(mode=0o700)
    for key in ("ca.crt", "ca.key"):
        (ca_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
    os.chmod(ca_dir / "ca.key", 0o440)  # as the pod sees it
    ca = CertificateAuthority.load_or_create(ca_dir)  # Helm's genCA makes an RSA CA
    env = {e["name"]: e.get("value") for e in r.container["env"]}
    assert env["APPLIANCE_TLS_CA_DIR"] == "/etc/appliance/tls"
    service = r.one("Service")["metadata"]["name"]
    names = env["APPLIANCE_TLS_NAMES"].split(",")
    assert f"{service}.{NAMESPACE}.svc" in names
    assert ca.signed(ca.issue("coordinator", names).certificate)
    projected = next(v for v in r.pod["volumes"] if v["name"] == "config")["projected"]
    mounted = {
        item["path"]: item.get("mode")
        for source in projected["sources"]
        if source.get("secret", {}).get("name") == secret["metadata"]["name"]
        for item in source["secret"]["items"]
    }
    assert mounted == {"tls/ca.crt": 0o444, "tls/ca.key": 0o440}


def test_an_existing_ca_secret_replaces_the_generated_one(helm: Helm) -> None:
    out = helm.template("--set", "tls.existingSecret=site-ca")
    assert "tls-ca" not in out.split("kind: Deployment")[0]
    assert "name: site-ca" in out
