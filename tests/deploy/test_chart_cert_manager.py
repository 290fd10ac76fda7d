"""The chart's tls.certManager: cert-manager issues the coordinator's CA (an intermediate with
isCA: true, under the chart's own selfSigned root or a given issuer) into the Secret the
coordinator mounts as its CA dir; no genCA Secret then. The objects are checked against
cert-manager's own CRDs, and the Secret they name, as cert-manager would write it, is one the
coordinator signs with."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cryptography import x509

from appliance.config.tls_fields import TlsSettings
from appliance.server.tls import ServingTls
from tests.cert_manager import crds, issue_ca, make_root, mount, schema
from tests.deploy.chart import CHART, NAMESPACE, RELEASE, REQUIRE_ENV, Helm, Rendered
from tests.kube.cluster import CannotRun

ENABLED = ("--set", "tls.certManager.enabled=true")


def _render(helm: Helm, *args: str) -> Rendered:
    text = helm.template(*args)
    return Rendered(text, [o for o in yaml.safe_load_all(text) if o])


def _mounted(r: Rendered, secret: str) -> dict[str, tuple[str, int]]:
    """The Secret's keys projected into the coordinator's config volume: path and mode."""
    projected = next(v for v in r.pod["volumes"] if v["name"] == "config")["projected"]
    return {
        item["key"]: (item["path"], item.get("mode"))
        for source in projected["sources"]
        if source.get("secret", {}).get("name") == secret
        for item in source["secret"]["items"]
    }


def test_cert_manager_issues_the_coordinators_ca_under_the_charts_own_root(helm: Helm) -> None:
    r = _render(helm, *ENABLED, "--set", "tls.certManager.duration=720h",
                "--set", "tls.certManager.renewBefore=240h")  # fmt: skip
    ca = r.one("Certificate", "-tls-ca")
    spec = ca["spec"]
    assert spec["isCA"] is True and "cert sign" in spec["usages"]
    assert (spec["duration"], spec["renewBefore"]) == ("720h", "240h")
    assert spec["privateKey"] == {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}
    # A CA, not a serving certificate: no names of its own. The coordinator signs its serving
    # certificate with it for the Service's names, as without cert-manager.
    assert "dnsNames" not in spec
    service = r.one("Service")["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in r.container["env"]}
    assert f"{service}.{NAMESPACE}.svc" in env["APPLIANCE_TLS_NAMES"].split(",")
    # The chain: selfSigned Issuer -> root Certificate (isCA) -> CA Issuer -> the coordinator's.
    selfsigned = r.one("Issuer", "-selfsigned")
    root = r.one("Certificate", "-root-ca")
    issuer = r.one("Issuer", "-root-ca")
    assert selfsigned["spec"] == {"selfSigned": {}}
    assert root["spec"]["isCA"] is True and root["spec"]["duration"] == "87600h"
    assert root["spec"]["issuerRef"]["name"] == selfsigned["metadata"]["name"]
    assert issuer["spec"]["ca"]["secretName"] == root["spec"]["secretName"]
    assert spec["issuerRef"] == {
        "name": issuer["metadata"]["name"], "kind": "Issuer", "group": "cert-manager.io"
    }  # fmt: skip
    # Its Secret is what the coordinator mounts, in cert-manager's key names; no genCA Secret.
    assert not [o for o in r.objects if o["kind"] == "Secret" and "tls" in o["metadata"]["name"]]
    assert _mounted(r, spec["secretName"]) == {
        "ca.crt": ("tls/ca.crt", 0o444),
        "tls.crt": ("tls/tls.crt", 0o444),
        "tls.key": ("tls/tls.key", 0o440),
    }
    assert env["APPLIANCE_TLS_CA_DIR"] == "/etc/appliance/tls"


def test_a_given_issuer_signs_it_and_the_chart_makes_no_root(helm: Helm) -> None:
    r = _render(helm, *ENABLED, "--set", "tls.certManager.issuerRef.name=site-ca",
                "--set", "tls.certManager.issuerRef.kind=ClusterIssuer")  # fmt: skip
    assert "Issuer" not in r.kinds()
    assert [o["metadata"]["name"] for o in r.objects if o["kind"] == "Certificate"] == [
        "appliance-tls-ca"
    ]
    assert r.one("Certificate")["spec"]["issuerRef"] == {
        "name": "site-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"
    }  # fmt: skip


def test_without_it_nothing_of_cert_manager_is_rendered(rendered: dict[str, Rendered]) -> None:
    for r in rendered.values():
        assert not [o for o in r.objects if o["apiVersion"].startswith("cert-manager.io/")]
        assert "Secret" in [
            o["kind"] for o in r.objects if o["metadata"]["name"].endswith("-tls-ca")
        ]


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["--set", "tls.existingSecret=site-ca"], "tls.certManager.enabled and tls.existing"),
        (["--set", "tls.certManager.issuerRef.kind=Issuer"], "certManager.issuerRef needs a name"),
        (["--set", "tls.certManager.issuerRef.kind=Vault"], "issuerRef/kind"),
        (["--set", "tls.certManager.duration=90d"], "certManager/duration"),
    ],
)  # fmt: skip
def test_a_wrong_setting_is_one_line_naming_it(helm: Helm, values: list[str], said: str) -> None:
    done = helm.run("template", RELEASE, str(CHART), *ENABLED, *values)
    assert done.returncode != 0 and said in done.stderr, done.stderr


def _strict(node: Any) -> Any:
    """The schema refusing fields it does not name, as the API server's strict field
    validation does (`kubectl apply` warns, server-side apply refuses)."""
    if isinstance(node, dict):
        node = {key: _strict(value) for key, value in node.items()}
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
    elif isinstance(node, list):
        node = [_strict(value) for value in node]
    return node


def test_the_objects_are_valid_by_cert_managers_own_crds(helm: Helm) -> None:
    try:
        found = crds()
    except CannotRun as e:
        if os.environ.get(REQUIRE_ENV) == "1":  # CI: a missing fetch fails, never skips
            pytest.fail(f"{REQUIRE_ENV}=1 but {e}", pytrace=False)
        pytest.skip(str(e))
    r = _render(helm, *ENABLED)
    objects = [o for o in r.objects if o["apiVersion"] == "cert-manager.io/v1"]
    assert sorted(o["kind"] for o in objects) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    for obj in objects:
        jsonschema.validate({"spec": obj["spec"]}, _strict(schema(found, obj["kind"])))
    # And the check has teeth: a misspelt field is refused.
    wrong = copy.deepcopy(r.one("Certificate", "-tls-ca"))
    wrong["spec"]["renewbefore"] = wrong["spec"].pop("renewBefore")
    with pytest.raises(jsonschema.ValidationError, match="renewbefore"):
        jsonschema.validate({"spec": wrong["spec"]}, _strict(schema(found, "Certificate")))


def test_the_secret_cert_manager_writes_is_one_the_coordinator_signs_with(
    helm: Helm, tmp_path: Path
) -> None:
    """Playing cert-manager: its Secret's keys, projected where the chart says, make a CA dir
    the coordinator serves from, for the Service's names, under the root clients pin."""
    r = _render(helm, *ENABLED)
    secret = make_root(tmp_path / "root")
    data = issue_ca(secret, "appliance CA appliance")
    mounted = _mounted(r, r.one("Certificate", "-tls-ca")["spec"]["secretName"])
    config = tmp_path / "etc-appliance"
    mount(config / "tls", {Path(path).name: data[key] for key, (path, _) in mounted.items()})
    env = {e["name"]: e.get("value") for e in r.container["env"]}
    ca_dir = config / Path(env["APPLIANCE_TLS_CA_DIR"]).relative_to("/etc/appliance")
    names = tuple(env["APPLIANCE_TLS_NAMES"].split(","))
    tls = ServingTls(TlsSettings(ca_dir, tmp_path / "serving", names=names), "0.0.0.0")
    assert tls.ca is not None and tls.ca_pem == data["ca.crt"]  # what clients pin: the root
    leaf, intermediate = x509.load_pem_x509_certificates(tls.cert_file.read_bytes())[:2]
    assert tls.ca.signed(leaf)
    intermediate.verify_directly_issued_by(x509.load_pem_x509_certificate(data["ca.crt"]))
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"appliance.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)
