"""`helm install` of helm/appliance into the real API server: every object accepted."""

from __future__ import annotations

import subprocess

from tests.kube.cluster import NAMESPACE, KubeCluster

EXPECTED = {
    "/apis/apps/v1/namespaces/{ns}/deployments/appliance",
    "/api/v1/namespaces/{ns}/services/appliance",
    "/api/v1/namespaces/{ns}/serviceaccounts/appliance",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/appliance",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/appliance",
    "/api/v1/namespaces/{ns}/persistentvolumeclaims/appliance-data",
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
