"""The Helm chart as the deploy tests see it: the fetched helm binary, rendered objects, and the
two sets of values every check runs with."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "appliance"
LARGE_VALUES = CHART / "ci" / "values-postgres-auth-large.yaml"
REQUIRE_ENV = "APPLIANCE_REQUIRE_HELM"
# kubernetes-validate ships schemas per minor version; the real API server used later is 1.34.
KUBERNETES_VERSIONS = ("1.33.0", "1.34.0")
RELEASE, NAMESPACE = "appliance", "ml"

VALUES = {"default": [], "postgres-auth-large": ["-f", str(LARGE_VALUES)]}

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Helm:
    """The fetched helm binary, isolated from the user's helm config and clusters."""

    binary: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=60
        )

    def template(self, *args: str) -> str:
        done = self.run("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout


@dataclasses.dataclass(frozen=True)
class Rendered:
    text: str
    objects: list[Obj]

    def one(self, kind: str, suffix: str = "", *, name: str | None = None) -> Obj:
        """The one object of this kind named `name`, or whose name ends with `suffix`."""
        found = [o for o in self.objects if o["kind"] == kind]
        found = [
            o
            for o in found
            if o["metadata"]["name"] == name
            or (name is None and o["metadata"]["name"].endswith(suffix))
        ]
        assert len(found) == 1, f"expected one {kind} {name or '*' + suffix}, got {len(found)}"
        return found[0]

    def kinds(self) -> list[str]:
        return [o["kind"] for o in self.objects]

    @property
    def pod(self) -> Obj:
        spec: Obj = self.one("Deployment")["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> Obj:
        (container,) = self.pod["containers"]
        return container

    def env(self, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
        """The coordinator's environment as the kubelet would build it (env beats envFrom)."""
        env: dict[str, str] = {}
        for source in self.container.get("envFrom", []):
            env.update(self.one("ConfigMap", name=source["configMapRef"]["name"])["data"])
        for var in self.container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "secretKeyRef" in var["valueFrom"]:
                ref = var["valueFrom"]["secretKeyRef"]
                env[var["name"]] = secrets[(ref["name"], ref["key"])]
            else:
                assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
                env[var["name"]] = NAMESPACE
        return env

    def volume(self, mount_path: str) -> Obj:
        (mount,) = [m for m in self.container["volumeMounts"] if m["mountPath"] == mount_path]
        (volume,) = [v for v in self.pod["volumes"] if v["name"] == mount["name"]]
        return volume
