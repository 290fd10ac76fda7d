"""The chart's tls.certManager on a real node (#36), with the test playing cert-manager's part.

No cert-manager controller can run here (no images of it), so: cert-manager's own CRDs
(fetched from its Go module) are applied, the chart is installed with tls.certManager.enabled
in a namespace of its own (Pod Security "restricted"), and the API server takes the chart's
Issuers and Certificates as valid objects of those CRDs. Then the test writes what cert-manager's
controller would: the Secret the coordinator's Certificate names, kubernetes.io/tls, holding an
intermediate CA signed by a root the test makes. The coordinator pod becomes Ready over TLS,
csctl and the client pinning only that root reach it through `kubectl port-forward`, and a job's
replicas (mutual TLS under certificates the intermediate signs) run it. Last, a renewal (a new
key and intermediate in the same Secret): the same pod, not restarted, serves a certificate of
the new intermediate once the kubelet has synced the Secret, and clients keep their root.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.cert_manager import crds, issue_ca, make_root
from tests.kube.cluster import RESTRICTED, CannotRun
from tests.kube.node import RealNode, wait_for
from tests.node.conftest import CHART, RELEASE, admin_token, coordinator_pod, uninstall

NAMESPACE = "appliance-cert-manager"
PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"
CSCTL = Path(sys.executable).parent / "csctl"


def _tls_secret(node: RealNode, name: str, data: dict[str, bytes]) -> None:
    """Create or replace the kubernetes.io/tls Secret `name`, as cert-manager's controller does."""
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }  # fmt: skip
    subprocess.run(
        [node.env["KUBECTL"], "apply", "-f", "-"], input=json.dumps(secret),
        env=node.process_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chart with tls.certManager.enabled, its CA Secret written by the test; the root."""
    try:
        definitions = crds()
    except CannotRun as e:
        pytest.skip(str(e))
    work = tmp_path_factory.mktemp("cert-manager")
    (work / "crds.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                "items": definitions}))  # fmt: skip
    node.kubectl("apply", "--server-side", "-f", str(work / "crds.json"))
    for crd in definitions:
        node.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}")
    node.kubectl("create", "namespace", NAMESPACE, check=False)
    node.kubectl("label", "--overwrite", "namespace", NAMESPACE,
                 *[f"{key}={value}" for key, value in RESTRICTED.items()])  # fmt: skip
    # No --wait: the pod cannot start until "cert-manager" has written the Secret.
    done = node.helm(
        "upgrade", "--install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "image.pullPolicy=Never", "--set", "tls.certManager.enabled=true",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    root = make_root(work / "root", "test site root CA")
    try:
        yield root
    finally:
        uninstall(node, NAMESPACE)


def _certificate(node: RealNode, name: str) -> dict[str, object]:
    found: dict[str, object] = node.kubectl_json("-n", NAMESPACE, "get", "certificate", name)
    return found


def _served_issuer(port: int, root: Path) -> str:
    """The issuer's common name of the certificate the HTTPS door serves, verified by `root`."""
    context = ssl.create_default_context(cafile=str(root / "ca.crt"))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return str(cert.issuer.rfc4514_string())


def test_the_coordinator_serves_and_runs_jobs_under_the_ca_cert_manager_issued(
    node: RealNode, installed: Path
) -> None:
    root = installed
    # The API server took the chart's objects as cert-manager's CRDs define them.
    certificate = _certificate(node, "appliance-tls-ca")
    spec = certificate["spec"]
    assert spec["isCA"] is True and spec["issuerRef"]["name"] == "appliance-root-ca"  # type: ignore[index]
    assert _certificate(node, "appliance-root-ca")["spec"]["isCA"] is True  # type: ignore[index]
    node.kubectl("-n", NAMESPACE, "get", "issuer", "appliance-selfsigned", "appliance-root-ca")
    assert not node.kubectl("-n", NAMESPACE, "get", "secret", "appliance-tls-ca",
                            "--ignore-not-found")  # fmt: skip
    # cert-manager's part: the Secret the Certificate names, an intermediate under our root.
    _tls_secret(node, spec["secretName"], issue_ca(root, "appliance CA 1"))  # type: ignore[index]
    pod = coordinator_pod(node, NAMESPACE)
    token = admin_token(node, NAMESPACE)
    env = {**os.environ, "CSCTL_TOKEN": token, "CSCTL_CA": str(root / "ca.crt")}
    with node.port_forward(NAMESPACE, "svc/appliance", 50051, 8080) as (grpc_port, http_port):
        assert _served_issuer(http_port, root) == "CN=appliance CA 1"
        listed = subprocess.run(
            [str(CSCTL), "--server", f"127.0.0.1:{grpc_port}", "get", "jobs", "-a"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        with ApplianceClient(f"127.0.0.1:{grpc_port}", token=token, ca=root / "ca.crt") as client:
            # Pipelined: a chief and one CS-2, talking mutual TLS under the intermediate.
            params = yaml.safe_load(PARAMS.read_text())
            params["runconfig"] = {**params.get("runconfig", {}), "execution_strategy": "pipeline"}
            job = client.submit(params=params, num_csx=1, num_steps=300, detach=True)
            done = job.wait(timeout=300)
            assert done.phase == Phase.SUCCEEDED, done.reason
    # A renewal: a new key and intermediate in the same Secret, taken by the same pod.
    _tls_secret(node, spec["secretName"], issue_ca(root, "appliance CA 2"))  # type: ignore[index]
    with node.port_forward(NAMESPACE, "svc/appliance", 8080) as (http_port,):
        wait_for(
            lambda: _served_issuer(http_port, root) == "CN=appliance CA 2",
            "the certificate of the renewed intermediate served",
            timeout=240,  # the kubelet syncs a Secret's volume at its pod syncs (node.sh: 10 s)
        )
    again = coordinator_pod(node, NAMESPACE)
    assert again["metadata"]["name"] == pod["metadata"]["name"]  # type: ignore[index]
    statuses = again["status"]["containerStatuses"]  # type: ignore[index]
    assert statuses[0]["restartCount"] == 0
