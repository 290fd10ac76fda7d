"""What the chart does for security by default: authentication on with an admin token made at
install, and replica pods that accept connections only from the coordinator (plus, by each
job's own policy, from their own job's pods)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import yaml

from appliance.server.auth import Authenticator
from appliance.server.tokens_file import read_entries
from tests.deploy.chart import CHART, RELEASE, Helm, Rendered


def test_authentication_is_on_by_default_with_a_generated_admin_token(
    rendered: dict[str, Rendered],
) -> None:
    secret = rendered["default"].one("Secret", name="appliance-auth")
    token = base64.b64decode(secret["data"]["admin-token"]).decode()
    tokens = yaml.safe_load(base64.b64decode(secret["data"]["tokens.yaml"]))
    assert len(token) == 43 and token.isalnum()
    (admin,) = tokens["tokens"]
    assert admin == {
        "user": "admin",
        "groups": [],
        "admin": True,
        "sha256": hashlib.sha256(token.encode()).hexdigest(),
    }
    # A tokens file of the admin's own replaces the generated one.
    secrets = [o for o in rendered["postgres-auth-large"].objects if o["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == [
        "appliance-replica-key",
        "appliance-tls-ca",
    ]


def test_authentication_can_be_turned_off_only_on_purpose(helm: Helm) -> None:
    text = helm.template("--set", "auth.enabled=false")
    objects = [o for o in yaml.safe_load_all(text) if o]
    secrets = [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"]
    assert secrets == ["appliance-replica-key", "appliance-tls-ca"]  # made either way
    assert "APPLIANCE_AUTH_TOKENS_FILE" not in text


def test_replica_pods_accept_connections_only_from_the_coordinator(
    rendered: dict[str, Rendered],
) -> None:
    r = rendered["default"]
    policy = r.one("NetworkPolicy", name="appliance-replicas")
    replicas = {
        "app.kubernetes.io/name": "appliance",
        "app.kubernetes.io/managed-by": "appliance-coordinator",
    }
    assert policy["spec"]["podSelector"] == {"matchLabels": replicas}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    coordinator = r.one("Deployment")["spec"]["selector"]
    assert rule == {"from": [{"podSelector": coordinator}]}
    # The coordinator's own pods are not replicas: the policy never cuts users off from it.
    labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not replicas.items() <= labels.items()


def test_the_replica_token_key_comes_from_a_secret_that_outlives_the_pod(
    rendered: dict[str, Rendered],
) -> None:
    """With PostgreSQL the data dir is an emptyDir: a key made there would be new after every
    restart, and the replicas the new coordinator adopts would be strangers to it."""
    for r in rendered.values():
        key = base64.b64decode(
            r.one("Secret", name="appliance-replica-key")["data"]["replica-token.key"]
        )
        assert len(key) == 64
        env = {e["name"]: e.get("value") for e in r.container["env"]}
        assert env["APPLIANCE_REPLICA_TOKEN_KEY_FILE"] == "/etc/appliance/replica-token.key"
        sources = r.volume("/etc/appliance")["projected"]["sources"]
        item = {"key": "replica-token.key", "path": "replica-token.key", "mode": 0o440}
        assert {"secret": {"name": "appliance-replica-key", "items": [item]}} in sources


def test_the_generated_admin_token_is_a_tokens_file_the_coordinator_reads_and_can_rotate(
    helm: Helm, tmp_path: Path
) -> None:
    text = helm.template("--set", "auth.adminTokenRotation=2026-11-29")
    [secret] = [
        o for o in yaml.safe_load_all(text) if o and o["metadata"]["name"] == "appliance-auth"
    ]
    # The value that made the token: an upgrade with another makes a new one (lookup, at
    # install/upgrade only: `helm template` cannot show it).
    assert secret["metadata"]["annotations"] == {"appliance.io/admin-token-rotation": "2026-11-29"}
    token = base64.b64decode(secret["data"]["admin-token"]).decode()
    path = tmp_path / "tokens.yaml"
    path.write_bytes(base64.b64decode(secret["data"]["tokens.yaml"]))
    principal = Authenticator.from_file(path).principal(f"Bearer {token}")
    assert principal.user == "admin" and principal.admin
    [entry] = read_entries(path)
    assert entry.expires is None  # listed by `appliance token list` with a stable id
    refused = helm.run("template", RELEASE, str(CHART), "--set", "auth.adminTokenRotation=a b")
    assert refused.returncode != 0 and "adminTokenRotation" in refused.stderr
