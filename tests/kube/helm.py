"""helm for tests: fetched by deploy/tools/fetch-helm.sh, run with its own config directories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.kube.cluster import REPO, CannotRun

FETCH_HELM = REPO / "deploy" / "tools" / "fetch-helm.sh"


def fetch_helm() -> Path:
    """The directory holding helm and kubectl; CannotRun (saying why) when they cannot be had."""
    done = subprocess.run(
        ["bash", str(FETCH_HELM)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise CannotRun(f"deploy/tools/fetch-helm.sh failed, so no helm: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def helm_env(home: Path, kubeconfig: Path) -> dict[str, str]:
    """An environment that keeps helm away from the user's config, cache and clusters."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(kubeconfig),
    }
