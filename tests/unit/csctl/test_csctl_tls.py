"""How csctl and the client trust the server: a CA by flag, environment or cluster entry;
plaintext only when asked and only to loopback; one line for every TLS mismatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance.client import ApplianceClient
from appliance.client.tls import resolve_trust
from appliance.client.user_config import ConfigError, resolve_server, set_cluster, use_cluster
from appliance.server.pki import CertificateAuthority

SESSION_CA = "CSCTL_CA"  # tests/conftest.py points it at the session's CA


@pytest.fixture
def other_ca(tmp_path: Path) -> Path:
    return CertificateAuthority.load_or_create(tmp_path / "other").cert_path


def test_the_right_ca_by_flag_works_and_none_is_one_line(
    cluster: FakeCluster, config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = os.environ[SESSION_CA]
    monkeypatch.delenv(SESSION_CA)
    csctl = Csctl(cluster.address)
    assert csctl("--certificate-authority", ca, "get", "jobs").exit_code == 0
    refused = csctl("get", "jobs")
    assert refused.exit_code == 1
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1, refused.output
    assert f"cannot verify the appliance at {cluster.address}" in lines[0]
    assert "not signed by the system's CAs" in lines[0]
    assert "Traceback" not in refused.output


def test_a_wrong_ca_names_the_server_and_the_ca(
    cluster: FakeCluster, config_file: Path, other_ca: Path
) -> None:
    refused = Csctl(cluster.address)("--certificate-authority", str(other_ca), "get", "jobs")
    assert refused.exit_code == 1
    assert refused.output.count("\n") == 1
    assert f"at {cluster.address}: its certificate is not signed by the CA {other_ca}" in (
        refused.output
    )


def test_plaintext_to_a_tls_server_says_so(cluster: FakeCluster, config_file: Path) -> None:
    refused = Csctl(cluster.address)("--insecure", "get", "jobs")
    assert refused.exit_code == 1
    assert "closed the plaintext connection: it serves TLS" in refused.output


def test_plaintext_never_leaves_the_machine(config_file: Path) -> None:
    refused = Csctl("10.9.8.7:50051")("--insecure", "get", "jobs")
    assert refused.exit_code == 2
    assert "allowed to a loopback address only, not 10.9.8.7:50051" in refused.output
    with pytest.raises(ConfigError, match="loopback"):
        ApplianceClient("coordinator.example:50051", insecure=True)
    for loopback in ("127.0.0.1:1", "[::1]:1", "localhost:1"):
        ApplianceClient(loopback, insecure=True).close()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "holds no PEM certificate"),
        (b"hello", "holds no PEM certificate"),
        (b"-----BEGIN CERTIFICATE-----\n" + b"A" * (2 << 20), "larger than"),
        (b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n", "damaged"),
    ],
)
def test_hostile_ca_files_are_one_line(
    tmp_path: Path, config_file: Path, content: bytes, problem: str
) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_bytes(content)
    result = Csctl("127.0.0.1:1")("--certificate-authority", str(bad), "get", "jobs")
    assert result.exit_code == 2
    assert problem in result.output and str(bad) in result.output
    missing = Csctl("127.0.0.1:1")("--certificate-authority", str(tmp_path / "no"), "get", "jobs")
    assert missing.exit_code == 2 and "cannot read the CA file" in missing.output
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: reading it would hang csctl
    hung = Csctl("127.0.0.1:1")("--certificate-authority", str(fifo), "get", "jobs")
    assert hung.exit_code == 2 and "is not a regular file" in hung.output


def test_trust_precedence_flag_env_cluster(tmp_path: Path, other_ca: Path) -> None:
    config = tmp_path / "config.yaml"
    session = Path(os.environ[SESSION_CA])
    set_cluster(config, "lab", "lab-host:50051", session, None)
    env = {"CSCTL_CONFIG": str(config)}
    assert resolve_trust(None, None, env).source.startswith(f"{session} (cluster lab")
    assert resolve_trust(None, None, {**env, "CSCTL_CA": str(other_ca)}).source.endswith(
        "($CSCTL_CA)"
    )
    assert resolve_trust(other_ca, None, env).source == f"{other_ca} (--certificate-authority)"
    assert resolve_trust(None, True, env).insecure
    assert resolve_trust(None, None, {**env, "CSCTL_INSECURE": "1"}).insecure
    assert resolve_trust(None, None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}).ca_pem is None


def test_clusters_are_set_used_and_resolved(tmp_path: Path, other_ca: Path) -> None:
    config = tmp_path / "config.yaml"
    env = {"CSCTL_CONFIG": str(config)}
    set_cluster(config, "a", "host-a:1", other_ca, None)
    set_cluster(config, "b", "host-b:2", None, None)
    assert resolve_server(None, env).address == "host-a:1"  # the first one is current
    use_cluster(config, "b")
    assert resolve_server(None, env).address == "host-b:2"
    assert resolve_server("flag:3", env).address == "flag:3"
    set_cluster(config, "a", "host-a:9", None, None)  # a change keeps the CA
    written = yaml.safe_load(config.read_text())
    assert written["clusters"]["a"] == {
        "server": "host-a:9",
        "certificate-authority": str(other_ca),
        "insecure": False,
    }
    with pytest.raises(ConfigError, match="no cluster 'c'"):
        use_cluster(config, "c")
    with pytest.raises(ConfigError, match="cluster name"):
        set_cluster(config, "bad name!", None, None, None)
    config.write_text("current-cluster: gone\nclusters: {}\n")
    with pytest.raises(ConfigError, match="names no cluster"):
        resolve_server(None, env)


def test_set_cluster_then_use_it_from_the_command_line(
    cluster: FakeCluster, config_file: Path, monkeypatch: pytest.MonkeyPatch, other_ca: Path
) -> None:
    ca = os.environ[SESSION_CA]
    monkeypatch.delenv(SESSION_CA)
    csctl = Csctl(None)
    added = csctl("config", "set-cluster", "lab", "--server", cluster.address,
                  "--certificate-authority", ca)  # fmt: skip
    assert added.exit_code == 0, added.output
    assert csctl("get", "jobs").exit_code == 0
    csctl("config", "set-cluster", "wrong", "--server", cluster.address,
          "--certificate-authority", str(other_ca))  # fmt: skip
    assert csctl("config", "use-cluster", "wrong").exit_code == 0
    assert "not signed by the CA" in csctl("get", "jobs").output
    refused = csctl("config", "set-cluster", "x", "--certificate-authority", "/etc/hostname")
    assert refused.exit_code == 2 and "holds no PEM certificate" in refused.output
