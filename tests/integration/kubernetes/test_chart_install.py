"""`helm install` of helm/appliance into the real API server: every object accepted, and the
coordinator's pod admitted under Pod Security "restricted" (the namespace enforces it)."""

from __future__ import annotations

import base64
import copy
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.integration.kubernetes.conftest import RELEASE
from tests.kube.cluster import NAMESPACE, REPO, RESTRICTED, KubeCluster
from tests.kube.helm import helm_env

EXPECTED = {
    "/apis/apps/v1/namespaces/{ns}/deployments/appliance",
    "/api/v1/namespaces/{ns}/services/appliance",
    "/api/v1/namespaces/{ns}/serviceaccounts/appliance",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/appliance",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/appliance",
    "/api/v1/namespaces/{ns}/persistentvolumeclaims/appliance-data",
    "/api/v1/namespaces/{ns}/secrets/appliance-auth",
    "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/appliance-replicas",
}


def test_helm_install_is_accepted_by_the_api_server(
    kube: KubeCluster, chart_release: subprocess.CompletedProcess[str]
) -> None:
    assert "STATUS: deployed" in chart_release.stdout, chart_release.stdout
    for path in EXPECTED:
        response = kube.request("GET", path.format(ns=NAMESPACE))
        assert response.status_code == 200, (path, response.text[:200])
    config_maps = kube.request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        params={"labelSelector": "app.kubernetes.io/instance=appliance"},
    ).json()["items"]
    assert len(config_maps) >= 2  # settings and the pool inventory


def _dry_run_pod(kube: KubeCluster, spec: dict[str, Any], name: str) -> Any:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    return kube.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", params={"dryRun": "All"}, json=pod
    )


def test_the_coordinator_pod_passes_pod_security_restricted(
    kube: KubeCluster, chart_release: subprocess.CompletedProcess[str]
) -> None:
    namespace = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}").json()
    assert RESTRICTED.items() <= namespace["metadata"]["labels"].items()
    deployment = kube.request(
        "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/appliance"
    ).json()
    spec = deployment["spec"]["template"]["spec"]
    admitted = _dry_run_pod(kube, spec, "coordinator-check")
    assert admitted.status_code == 201, admitted.text[:500]
    # The control: the same pod allowed to escalate is refused, so the check is enforced.
    loose = copy.deepcopy(spec)
    loose["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    refused = _dry_run_pod(kube, loose, "coordinator-loose")
    assert refused.status_code == 403 and "PodSecurity" in refused.text, refused.text[:500]


def test_authentication_is_on_with_an_admin_token_made_at_install(
    kube: KubeCluster, chart_release: subprocess.CompletedProcess[str]
) -> None:
    data = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/appliance-auth").json()
    token = base64.b64decode(data["data"]["admin-token"]).decode()
    tokens = yaml.safe_load(base64.b64decode(data["data"]["tokens.yaml"]))
    # The tokens file the coordinator reads holds the digest, never the token.
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert tokens == {"tokens": [{"user": "admin", "groups": [], "admin": True, "sha256": digest}]}
    assert len(token) >= 40 and token not in base64.b64decode(data["data"]["tokens.yaml"]).decode()
    deployment = kube.request(
        "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/appliance"
    ).json()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["APPLIANCE_AUTH_TOKENS_FILE"] == "/etc/appliance/tokens.yaml"


def _secret_data(kube: KubeCluster, name: str) -> dict[str, str]:
    found = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}").json()
    return dict(found["data"])


def test_an_upgrade_keeps_the_admin_token_and_the_replica_key(
    kube: KubeCluster, chart_release: subprocess.CompletedProcess[str], helm_bin: Path
) -> None:
    """A new admin token would lock the admins out; a new key would make the replicas a
    restarted coordinator adopts strangers. Also: values from before the switches existed
    (`--reuse-values` of an older release) still render."""
    before = {
        name: _secret_data(kube, name) for name in ("appliance-auth", "appliance-replica-key")
    }
    older = kube.workdir / "older-values.yaml"
    older.write_text("auth:\n  existingSecret: ''\n  secretKey: tokens.yaml\n")
    done = subprocess.run(
        [str(helm_bin / "helm"), "upgrade", RELEASE, str(REPO / "helm" / "appliance"),
         "--namespace", NAMESPACE, "-f", str(older)],
        env=helm_env(kube.workdir / "helm-home", kube.kubeconfig),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    after = {name: _secret_data(kube, name) for name in before}
    assert after == before
