"""A real kube-apiserver (+ etcd), the chart installed into it, and a stand-in kubelet.

Built and started once per session (see tests/kube/cluster.py). The coordinator under test
talks to the API server with the token of the chart's ServiceAccount, so every test here also
proves the chart's Role is enough. Skips, saying why, only when deploy/kube-testenv/build.sh
reports it cannot run here; with APPLIANCE_REQUIRE_KUBE=1 (CI) that is a failure instead.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.coordinator.harness import RunningCoordinator, serving
from tests.kube.cluster import ADMIN_TOKEN, NAMESPACE, REPO, CannotRun, KubeCluster, cannot_run
from tests.kube.helm import fetch_helm, helm_env

IMAGE = "appliance:dev"
RELEASE = "appliance"
SERVICE_ACCOUNT = "appliance"  # the chart's fullname for release "appliance"
PARAMS = REPO / "examples" / "params_fc_mnist.yaml"

REQUIRE = "APPLIANCE_REQUIRE_KUBE"


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"))
    try:
        cluster.start()
    except CannotRun as e:
        cluster.stop()
        cannot_run(f"no Kubernetes API server: {e}", REQUIRE)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    try:
        return fetch_helm()
    except CannotRun as e:
        cannot_run(str(e), REQUIRE)
        raise


@pytest.fixture(scope="session")
def chart_release(kube: KubeCluster, helm_bin: Path) -> subprocess.CompletedProcess[str]:
    """`helm install` of the chart with its default values: every object accepted."""
    done = subprocess.run(
        [str(helm_bin / "helm"), "install", RELEASE, str(REPO / "helm" / "appliance"),
         "--namespace", NAMESPACE],
        env=helm_env(kube.workdir / "helm-home", kube.kubeconfig),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="session")
def role_kubeconfig(kube: KubeCluster, chart_release: object) -> Path:
    """A kubeconfig with the token of the chart's ServiceAccount (bound to the chart's Role)."""
    token = kube.service_account_token(SERVICE_ACCOUNT)
    return kube.write_kubeconfig(kube.workdir / "coordinator.kubeconfig", token, NAMESPACE)


@pytest.fixture(scope="session")
def kubelet(kube: KubeCluster) -> Iterator[subprocess.Popen[str]]:
    workdir = kube.workdir / "kubelet"
    workdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kube.kubelet", "--server", kube.server,
         "--token", ADMIN_TOKEN, "--namespace", NAMESPACE, "--nodes", "8",
         "--image", IMAGE, "--workdir", str(workdir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=(workdir / "kubelet.log").open("ab"),
        text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the kubelet prints one line once its nodes are Ready
    assert line.startswith("kubelet ready"), f"kubelet did not start: {line!r}"
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.fixture
def kube_settings(role_kubeconfig: Path, kubelet: object) -> dict[str, object]:
    return {
        "backend": "kubernetes",
        "kube_config": role_kubeconfig,
        "kube_namespace": NAMESPACE,
        "kube_image": IMAGE,
        "kube_request_timeout_seconds": 5.0,
    }


@pytest.fixture
def coordinator(tmp_path: Path, kube_settings: dict[str, object]) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", **kube_settings) as running:
        yield running


@pytest.fixture
def client(coordinator: RunningCoordinator) -> Iterator[ApplianceClient]:
    with ApplianceClient(coordinator.address) as c:
        yield c
