"""Two coordinators on the real node: the chart with `replicas: 2` on PostgreSQL.

The PostgreSQL server is a throwaway one on this machine (tests/postgres.py) that also listens
on the node's bridge address, so the coordinator pods reach it from the pod network. Shared
by tests/node/test_ha_on_node.py and bench/real_node.py's failover measure.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy.engine import make_url

from appliance.client import ApplianceClient
from appliance.client.errors import ApplianceError
from tests.kube.cluster import REPO, RESTRICTED
from tests.kube.node import RealNode, trust_session_ca, wait_for
from tests.postgres import postgres_server

CHART = REPO / "helm" / "appliance"
PARAMS = REPO / "examples" / "params_fc_mnist.yaml"
SMALL = json.dumps({role: {"cpu": "50m"} for role in ("chief", "cs2", "memoryx", "swarmx")})
COORDINATOR = "app.kubernetes.io/component=coordinator"


class HaRelease:
    """The chart installed with two coordinators in `namespace`; `token` is the admin's."""

    def __init__(self, node: RealNode, namespace: str, token: str) -> None:
        self.node = node
        self.namespace = namespace
        self.token = token

    def pods(self) -> list[dict[str, Any]]:
        return list(
            self.node.kubectl_json("-n", self.namespace, "get", "pods", "-l", COORDINATOR)["items"]
        )

    def leader_pod(self) -> str | None:
        """The Ready coordinator pod (a standby is never Ready), if there is one."""
        for pod in self.pods():
            if pod["metadata"].get("deletionTimestamp"):
                continue
            conditions = pod["status"].get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return str(pod["metadata"]["name"])
        return None

    def lease(self) -> dict[str, Any]:
        return dict(
            self.node.kubectl_json("-n", self.namespace, "get", "lease", "appliance-leader")
        )

    @contextlib.contextmanager
    def client(self, pod: str) -> Iterator[ApplianceClient]:
        """The client through a port-forward to one coordinator pod."""
        with (
            self.node.port_forward(self.namespace, f"pod/{pod}", 50051) as (port,),
            ApplianceClient(f"127.0.0.1:{port}", token=self.token) as client,
        ):
            yield client

    def kill_leader(self) -> tuple[str, float]:
        """SIGKILL the leader's container from the runtime; (its pod, the time of the kill)."""
        pod = wait_for(self.leader_pod, "a leader")
        self.node.kill_container(self.namespace, pod)
        return pod, time.time()

    def submit_to_leader(self, num_steps: int, timeout: float = 60) -> tuple[str, str]:
        """Submit a 1-CS-2 job through whichever coordinator leads, retrying while none does
        (a standby refuses in one line); (the job id, the pod it went through)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            pod = self.leader_pod()
            if pod:
                try:
                    with self.client(pod) as client:
                        job = client.submit(
                            params=str(PARAMS), num_csx=1, num_steps=num_steps, detach=True
                        )
                        return job.id, pod
                except (ApplianceError, TimeoutError, AssertionError) as e:
                    last = str(e)
            time.sleep(0.2)
        raise TimeoutError(f"no coordinator took a job within {timeout:.0f} s: {last}")


@contextlib.contextmanager
def ha_release(node: RealNode, namespace: str, *values: str) -> Iterator[HaRelease]:
    """PostgreSQL for the pods, the chart with `replicas: 2` on it (and `values`, more of
    helm's --set), then everything removed."""
    also_on = (node.env["NODE_IP"], node.env["POD_CIDR"])
    with postgres_server(also_on=also_on) as server, server.fresh_database() as database:
        url = make_url(database).set(drivername="postgresql", host=node.env["NODE_IP"])
        node.kubectl("create", "namespace", namespace, check=False)
        labels = [f"{key}={value}" for key, value in RESTRICTED.items()]
        node.kubectl("label", "--overwrite", "namespace", namespace, *labels)
        node.kubectl(
            "-n", namespace, "create", "secret", "generic", "appliance-db",
            f"--from-literal=url={url.render_as_string(hide_password=False)}",
        )  # fmt: skip
        trust = trust_session_ca(node, namespace)
        # No --wait: helm would wait for both pods to be Ready, and a standby never is.
        done = node.helm(
            "install", "appliance", str(CHART), "--namespace", namespace, *trust,
            "--set", "image.pullPolicy=Never", "--set", "replicas=2",
            "--set", "database.existingSecret=appliance-db", "--set-json",
            f"replicaResources={SMALL}", *values,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        try:
            node.kubectl(
                "-n", namespace, "wait", "--for=jsonpath={.status.readyReplicas}=1",
                "deployment/appliance", "--timeout=180s", timeout=200,
            )  # fmt: skip
            secret = node.kubectl_json("-n", namespace, "get", "secret", "appliance-auth")
            token = base64.b64decode(secret["data"]["admin-token"]).decode()
            yield HaRelease(node, namespace, token)
        finally:
            node.helm("uninstall", "appliance", "--namespace", namespace, "--wait")
            node.kubectl("delete", "namespace", namespace, "--wait=true", check=False)
