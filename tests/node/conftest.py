"""A real single-node cluster (tests/kube/node.py) with the chart installed from the image.

Started once per session: ~20 s for the node, ~5 s for `helm install --wait`. Skips, saying
why, when it cannot run here (not root, no Docker for the image, no Go for the binaries); with
APPLIANCE_REQUIRE_NODE=1 (CI) that is a failure instead. APPLIANCE_NODE_ENV=DIR/env uses a node
started by hand (`deploy/kube-testenv/node.sh up DIR appliance:dev`) and leaves it running.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.cluster import REPO, RESTRICTED, CannotRun, cannot_run
from tests.kube.node import RealNode, build_image, trust_session_ca, wait_for

NAMESPACE = "appliance-e2e"
RELEASE = "appliance"
CHART = REPO / "helm" / "appliance"

REQUIRE = "APPLIANCE_REQUIRE_NODE"


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    existing = os.environ.get("APPLIANCE_NODE_ENV")
    if existing:
        yield RealNode.existing(Path(existing))
        return
    if os.geteuid() != 0:
        cannot_run("no real node: it needs root (a bridge, iptables chains, mounts)", REQUIRE)
    try:
        image = build_image()
        real = RealNode.up(tmp_path_factory.mktemp("node"), [image])
    except CannotRun as e:
        cannot_run(f"no real node: {e}", REQUIRE)
        raise
    try:
        yield real
    finally:
        real.down()


@pytest.fixture(scope="session")
def namespace(node: RealNode) -> str:
    labels = [f"{key}={value}" for key, value in RESTRICTED.items()]
    node.kubectl("create", "namespace", NAMESPACE, check=False)
    node.kubectl("label", "--overwrite", "namespace", NAMESPACE, *labels)
    return NAMESPACE


def install(node: RealNode, namespace: str, *values: str) -> None:
    """`helm install --wait` (or upgrade) of the chart, as the README's kind section does."""
    trust = trust_session_ca(node, namespace)
    done = node.helm(
        "upgrade", "--install", RELEASE, str(CHART), "--namespace", namespace, "--wait",
        "--timeout", "180s", "--set", "image.pullPolicy=Never", *trust, *values,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def admin_token(node: RealNode, namespace: str) -> str:
    """The admin token the chart made at install (its Secret)."""
    secret = node.kubectl_json("-n", namespace, "get", "secret", "appliance-auth")
    return base64.b64decode(secret["data"]["admin-token"]).decode()


def uninstall(node: RealNode, namespace: str) -> None:
    """The release and its namespace gone (the namespace's pods with it)."""
    node.helm("uninstall", RELEASE, "--namespace", namespace, "--wait")
    node.kubectl("delete", "namespace", namespace, "--wait=true", check=False, timeout=180)


@pytest.fixture(scope="session")
def release(node: RealNode, namespace: str) -> str:
    """The chart installed as the README says, model dirs on a volume; the admin token."""
    # Checkpoints on a volume: ReadWriteOnce is enough on one node, as on kind.
    install(
        node, namespace, "--set", "modelDirs.persistence.enabled=true",
        "--set-json", 'modelDirs.persistence.accessModes=["ReadWriteOnce"]',
    )  # fmt: skip
    secret = node.kubectl_json("-n", namespace, "get", "secret", "appliance-auth")
    return base64.b64decode(secret["data"]["admin-token"]).decode()


def coordinator_pod(node: RealNode, namespace: str) -> dict[str, object]:
    """The Ready coordinator pod (waits for one)."""

    def ready() -> dict[str, object] | None:
        pods = node.kubectl_json(
            "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=coordinator"
        )["items"]
        for pod in pods:
            conditions = pod["status"].get("conditions", [])
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return dict(pod)
        return None

    return dict(wait_for(ready, "a Ready coordinator pod", timeout=180))


def replace_coordinator(node: RealNode, namespace: str, old: str) -> str:
    """Delete the coordinator pod `old`; the name of the Ready one that replaces it."""
    node.kubectl("-n", namespace, "delete", "pod", old, "--wait=false")

    def replaced() -> dict[str, object] | None:
        pod = coordinator_pod(node, namespace)
        return None if pod["metadata"]["name"] == old else pod  # type: ignore[index]

    return str(wait_for(replaced, "a new coordinator pod")["metadata"]["name"])
