"""A real Kubernetes control plane for tests: etcd + kube-apiserver on 127.0.0.1.

deploy/kube-testenv/build.sh provides the binaries (it builds kube-apiserver from the pinned
k8s.io/kubernetes module once and caches it). Nothing plays the kubelet or the controllers:
tests/kube/kubelet.py stands in for the kubelet (and binds pods, as kube-scheduler would).

Run by hand: `python -m tests.kube.cluster /tmp/kube` starts one and prints its kubeconfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "deploy" / "kube-testenv" / "build.sh"
ADMIN_TOKEN = "appliance-test-admin"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
NAMESPACE = "appliance-test"


class CannotRun(Exception):
    """The script says no API server can run on this machine; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binaries() -> dict[str, str]:
    """Run the build script; the env file it names gives the binaries' paths."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        raise CannotRun(result.stderr.strip().splitlines()[-1] if result.stderr else "failed")
    env_file = Path(result.stdout.strip().splitlines()[-1])
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


class KubeCluster:
    """etcd + kube-apiserver in `workdir`; `kubeconfig` is an admin (system:masters) config."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = 0
        self.etcd_url = ""
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.version = ""

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, *, extra_args: tuple[str, ...] = ()) -> KubeCluster:
        bins = binaries()
        self.version = bins["KUBE_VERSION"]
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        _openssl("genrsa", "-out", str(w / "sa.key"), "2048")
        _openssl("rsa", "-in", str(w / "sa.key"), "-pubout", "-out", str(w / "sa.pub"))
        (w / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')

        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                bins["ETCD"], "--name", "test", "--data-dir", str(w / "etcd"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"test={peer}", "--log-level", "warn",
            ],
        )  # fmt: skip
        _wait_until(lambda: httpx.get(f"{self.etcd_url}/health").status_code == 200, "etcd")

        self.port = free_port()
        self._apiserver_argv = [
                bins["KUBE_APISERVER"],
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={w / 'certs'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",
                "--profiling=false", "-v=1",
                *extra_args,
        ]  # fmt: skip
        self._spawn("kube-apiserver", self._apiserver_argv)
        self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN, NAMESPACE)
        _wait_until(self._ready, "kube-apiserver /readyz", timeout=90)
        # Pod Security "restricted" enforced: the API server's admission refuses any pod of the
        # namespace (the chart's, the coordinator's replicas) that does not pass it.
        namespace = {"name": NAMESPACE, "labels": RESTRICTED}
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": namespace})
        # No controller manager: make the default ServiceAccount the admission plugin expects.
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": NAMESPACE},
            }
        )
        return self

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd. Its watch cache
        starts empty, so a watch resuming from an older resourceVersion gets "410 Gone"."""
        old = self.procs.pop()
        os.killpg(old.pid, 9)  # a crash: its open watches just break
        old.wait(30)
        self._spawn("kube-apiserver", self._apiserver_argv)
        _wait_until(self._ready, "kube-apiserver /readyz after a restart", timeout=90)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.procs.append(
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
        if self.procs[-1].poll() is not None:
            raise RuntimeError(f"{name} exited at once; see {self.workdir / name}.log")

    def _ready(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a control-plane process exited; logs in {self.workdir}")
        try:
            return self.request("GET", "/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def write_kubeconfig(self, path: Path, token: str, namespace: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.server, "insecure-skip-tls-verify": True},
                }
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "test",
                    "context": {"cluster": "test", "user": "user", "namespace": namespace},
                }
            ],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def request(
        self, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN, **kw: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        return httpx.request(
            method,
            self.server + path,
            headers=headers,
            content=json.dumps(body) if body is not None else None,
            verify=False,
            timeout=30,
            **kw,
        )

    def apply(self, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
        """Create an object (cluster-scoped or namespaced); an existing one is left as is."""
        kind = obj["kind"]
        group_version = obj["apiVersion"]
        plural = _PLURALS[kind]
        base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        ns = namespace or obj["metadata"].get("namespace", "")
        path = (
            f"{base}/namespaces/{ns}/{plural}"
            if ns and kind != "Namespace"
            else f"{base}/{plural}"
        )
        response = self.request("POST", path, obj)
        if response.status_code not in (200, 201, 409):
            raise RuntimeError(f"creating {kind}: {response.status_code} {response.text}")
        return dict(response.json())

    def service_account_token(self, name: str, namespace: str = NAMESPACE) -> str:
        """A token for a ServiceAccount, from the TokenRequest API (as kubectl create token)."""
        response = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        response.raise_for_status()
        return str(response.json()["status"]["token"])

    def compact_etcd(self) -> int:
        """Compact etcd to its current revision; watches resuming from before now get 410."""
        revision = int(
            httpx.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA=="}).json()["header"][
                "revision"
            ]
        )
        response = httpx.post(
            f"{self.etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
        )
        response.raise_for_status()
        return revision

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(5)


_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Node": "nodes",
    "Pod": "pods",
}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _wait_until(check: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s")


@contextlib.contextmanager
def running_cluster(workdir: Path) -> Iterator[KubeCluster]:
    cluster = KubeCluster(workdir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/appliance-kube")
    shutil.rmtree(target, ignore_errors=True)
    with running_cluster(target) as c:
        print(f"kube-apiserver {c.version} at {c.server}; KUBECONFIG={c.kubeconfig}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


def cannot_run(message: str, require_env: str) -> None:
    """Skip, saying why; with `require_env`=1 in the environment (CI), fail instead."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{require_env}=1 but {message}", pytrace=False)
    pytest.skip(message)
