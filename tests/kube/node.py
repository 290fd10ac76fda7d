"""A real single-node cluster for tests: deploy/kube-testenv/node.sh, driven from Python.

The node runs real containers (containerd + runc) on a CNI bridge, with kube-proxy and CoreDNS,
so the chart, the image and the Kubernetes backend meet everything a kind cluster has. The
appliance image comes from deploy/image/build.sh (Docker), imported into the node's containerd.

Run by hand: `sudo deploy/kube-testenv/node.sh up /tmp/node appliance:dev`, then point the tests
at it with APPLIANCE_NODE_ENV=/tmp/node/env (they then neither start nor stop it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import timing
from tests.kube.cluster import REPO, CannotRun, free_port

NODE_SCRIPT = REPO / "deploy" / "kube-testenv" / "node.sh"
IMAGE_SCRIPT = REPO / "deploy" / "image" / "build.sh"


def build_image() -> str:
    """The appliance image's tag, built (or found in Docker's cache) by deploy/image/build.sh."""
    done = subprocess.run(
        ["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["failed"]
        raise CannotRun(f"deploy/image/build.sh: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]


class RealNode:
    """One node.sh cluster: `env` holds what node.sh printed (KUBECONFIG, KUBECTL, HELM...)."""

    def __init__(self, workdir: Path, *, owned: bool = True) -> None:
        self.workdir = workdir
        self.owned = owned
        self.env: dict[str, str] = {}
        self.startup_log = ""

    @classmethod
    def up(cls, workdir: Path, images: list[str]) -> RealNode:
        node = cls(workdir)
        try:
            done = subprocess.run(
                ["bash", str(NODE_SCRIPT), "up", str(workdir), *images],
                capture_output=True, text=True, timeout=900, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            node.down()  # what it made so far (node.sh wrote its marker before making any)
            raise
        if done.returncode != 0:
            node.down()
            raise RuntimeError(f"node.sh up failed:\n{done.stderr[-4000:]}")
        node._read_env(Path(done.stdout.strip().splitlines()[-1]))
        node.startup_log = done.stderr
        return node

    @classmethod
    def existing(cls, env_file: Path) -> RealNode:
        node = cls(env_file.parent, owned=False)
        node._read_env(env_file)
        return node

    def _read_env(self, env_file: Path) -> None:
        lines = env_file.read_text().splitlines()
        self.env = dict(line.split("=", 1) for line in lines if "=" in line)

    def down(self) -> None:
        if self.owned:
            subprocess.run(
                ["bash", str(NODE_SCRIPT), "down", str(self.workdir)],
                capture_output=True, timeout=300, check=False,
            )  # fmt: skip

    # --- tools -------------------------------------------------------------------------
    def process_env(self) -> dict[str, str]:
        path = f"{Path(self.env['KUBECTL']).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {**os.environ, "KUBECONFIG": self.env["KUBECONFIG"], "PATH": path}

    def kubectl(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        done = subprocess.run(
            [self.env["KUBECTL"], *args], env=self.process_env(),
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        home = self.workdir / "helm-home"
        env = {
            **self.process_env(),
            "HOME": str(home),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        return subprocess.run(
            [self.env["HELM"], *args], env=env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def ctr(self, *args: str) -> str:
        done = subprocess.run(
            ["ctr", "--address", self.env["CONTAINERD_ADDRESS"], "-n", "k8s.io", *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def running_container(self, namespace: str, pod: str) -> str:
        """The containerd id of the running (app, not sandbox) container of a pod."""
        for task in self.ctr("tasks", "ls", "-q").split():
            labels = json.loads(self.ctr("containers", "info", task)).get("Labels", {})
            if (
                labels.get("io.cri-containerd.kind") == "container"
                and labels.get("io.kubernetes.pod.namespace") == namespace
                and labels.get("io.kubernetes.pod.name") == pod
            ):
                return task
        raise AssertionError(f"no running container for pod {namespace}/{pod}")

    def kill_container(self, namespace: str, pod: str) -> None:
        """SIGKILL from the runtime, as the OOM killer or a node problem would."""
        self.ctr("tasks", "kill", "-s", "KILL", self.running_container(namespace, pod))

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, *ports: int) -> Iterator[list[int]]:
        """`kubectl port-forward` as the README says; yields the local ports, in order."""
        local = [free_port() for _ in ports]
        spec = [f"{here}:{there}" for here, there in zip(local, ports, strict=True)]
        proc = subprocess.Popen(
            [self.env["KUBECTL"], "-n", namespace, "port-forward", target, *spec],
            env=self.process_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(lambda: all(_listening(port) for port in local), f"port-forward {target}")
            yield local
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(check: Any, what: str, timeout: float = 120) -> Any:
    """Poll `check` until it returns something true; its value. No sleep stands in for it.
    `timeout` is stretched by APPLIANCE_TEST_SLOWDOWN (tests/timing.py)."""
    timeout = timing.scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s")


SESSION_CA_SECRET = "appliance-test-ca"


def trust_session_ca(node: RealNode, namespace: str) -> list[str]:
    """The session's CA (tests/conftest.py) as a Secret in `namespace`, and the chart values
    that make the coordinator sign its serving certificate with it: the suite's clients pin
    that CA. (The CA the chart makes by itself is checked in tests/deploy.)"""
    ca_dir = Path(os.environ["APPLIANCE_TLS_CA_DIR"])
    node.kubectl(
        "-n", namespace, "create", "secret", "generic", SESSION_CA_SECRET,
        f"--from-file=ca.crt={ca_dir / 'ca.crt'}", f"--from-file=ca.key={ca_dir / 'ca.key'}",
        check=False,  # already there: the same session's CA
    )  # fmt: skip
    return ["--set", f"tls.existingSecret={SESSION_CA_SECRET}"]
