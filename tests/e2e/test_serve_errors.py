"""`appliance serve` with settings it cannot start with: one `Error:` line saying what to fix,
exit code 1, no traceback."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Served

BIN = Path(sys.executable).parent


def serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "appliance", "serve", "--data-dir", tmp_path / "data", "--grpc-port", "0",
         "--http-port", "0"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    for needle in needles:
        assert needle in line, line


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("systems: [a, a]\nmemoryx: [m]\nswarmx: [s]\n", "names used twice: a"),
        ("systems: []\nmemoryx: [m]\nswarmx: [s]\n", "systems"),
        ("systems: [a]\nmemoryx: [m]\nswarmx: [s]\ngpus: [g]\n", "gpus"),
        ("systems: [a\n", "is not YAML"),
    ],
)
def test_bad_inventory_file(tmp_path: Path, text: str, needle: str) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(text)
    done = serve(tmp_path, APPLIANCE_INVENTORY_FILE=str(inventory))
    assert_one_line_error(done, f"inventory file {inventory}", needle)


def test_missing_inventory_file(tmp_path: Path) -> None:
    done = serve(tmp_path, APPLIANCE_INVENTORY_FILE=str(tmp_path / "absent.yaml"))
    assert_one_line_error(done, "cannot read the inventory file")


def test_unusable_kubeconfig(tmp_path: Path) -> None:
    done = serve(
        tmp_path, APPLIANCE_BACKEND="kubernetes", APPLIANCE_KUBE_CONFIG=str(tmp_path / "none")
    )
    assert_one_line_error(done, "cannot configure the Kubernetes client", "APPLIANCE_KUBE_CONFIG")


def test_unreachable_api_server_at_start(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    done = serve(
        tmp_path,
        APPLIANCE_BACKEND="kubernetes",
        APPLIANCE_KUBE_CONFIG=str(kubeconfig),
        APPLIANCE_KUBE_REQUEST_TIMEOUT_SECONDS="1",
    )
    assert_one_line_error(done, "cannot find the replicas still running", "unreachable")


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"APPLIANCE_SYSTEMS": "0"}, ["setting APPLIANCE_SYSTEMS", "greater than or equal"]),
        ({"APPLIANCE_MODEL_DIRS_ALLOWED": "/scratch"}, ["model_dirs_allowed", "JSON"]),
        ({"APPLIANCE_MODEL_DIRS_ALLOWED": '["/"]'}, ["model_dirs_allowed: '/'"]),
        ({"APPLIANCE_MODEL_DIRS_ALLOWED": '["shared"]'}, ["'shared' must be an absolute"]),
        ({"APPLIANCE_KUBE_REPLICA_MEMORY_LIMIT": "lots"}, ["KUBE_REPLICA_MEMORY_LIMIT"]),
        (
            {"APPLIANCE_KUBE_REPLICA_RESOURCES": '{"cs2": {"cpu": "lots"}}'},
            ["setting APPLIANCE_KUBE_REPLICA_RESOURCES (cs2.cpu)", "pattern", "'lots'"],
        ),
        (
            {"APPLIANCE_KUBE_REPLICA_RESOURCES": '{"cs3": {"cpu": "1"}}'},
            ["setting APPLIANCE_KUBE_REPLICA_RESOURCES (cs3)", "Extra inputs"],
        ),
        ({"APPLIANCE_KUBE_REPLICA_RESOURCES": "cs2=1"}, ["kube_replica_resources", "JSON"]),
    ],
)
def test_a_bad_setting_is_named(tmp_path: Path, env: dict[str, str], needles: list[str]) -> None:
    assert_one_line_error(serve(tmp_path, **env), *needles)


def test_a_short_replica_token_key_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "replica-token.key"
    key.write_bytes(b"short")
    done = serve(tmp_path, APPLIANCE_REPLICA_TOKEN_KEY_FILE=str(key))
    assert_one_line_error(done, "replica token key", "holds 5 bytes")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"APPLIANCE_SIM_FAIL_AT": "cs2-0@soon"}, "'cs2-0@soon' is not REPLICA@STEP"),
        ({"APPLIANCE_SIM_STEP_SECONDS": "-1"}, "greater than or equal to 0"),
        ({"APPLIANCE_SIM_FAILURE_RATE": "2"}, "less than or equal to 1"),
    ],
)
def test_bad_sim_setting(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    done = serve(tmp_path, APPLIANCE_BACKEND="sim", **env)
    assert_one_line_error(done, f"setting {next(iter(env))}", needle)


def run_on_ports(
    data_dir: Path, command: str, grpc_port: int, http_port: int
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "appliance", command, "--data-dir", data_dir,
         "--grpc-port", str(grpc_port), "--http-port", str(http_port)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("command", ["serve", "demo"])
@pytest.mark.parametrize("door", ["gRPC", "HTTP"])
def test_a_taken_port_is_one_line(
    tmp_path: Path, serving: Served, command: str, door: str
) -> None:
    """A second coordinator on a port the first holds: one `Error:` line and nothing else
    (grpcio's C core logged its failed bind, and its server, collected after the loop closed,
    printed a dozen lines of `Event loop is closed`)."""
    grpc_port, http_port = (int(u.rstrip("/").rsplit(":", 1)[1]) for u in serving)
    taken = grpc_port if door == "gRPC" else http_port
    second = tmp_path / "second"
    done = run_on_ports(
        second, command, taken if door == "gRPC" else 0, taken if door == "HTTP" else 0
    )
    assert done.returncode == 1, done
    option = "--grpc-port" if door == "gRPC" else "--http-port"
    assert done.stderr.splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{taken} ({door}): the port is in use; pick another "
        f"with {option} (0 = any free port)"
    ]
    assert not second.exists(), "nothing is made before both ports are held"


def test_the_grpc_port_is_not_shared(serving: Served) -> None:
    """grpcio binds with SO_REUSEPORT unless told not to: then any process of the same user
    could bind the coordinator's port too and take a share of its connections and tokens."""
    port = int(serving.address.rsplit(":", 1)[1])
    with socket.socket() as thief:
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with pytest.raises(OSError) as refused:
            thief.bind(("127.0.0.1", port))
    assert refused.value.errno == errno.EADDRINUSE


def test_a_bad_client_ca_file_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    """Mutual TLS with a client CA bundle that is not PEM: nothing serves (#36)."""
    bundle = tmp_path / "client-cas.pem"
    bundle.write_text("not a certificate\n")
    done = serve(tmp_path, APPLIANCE_TLS_CLIENT_CA_FILE=str(bundle))
    assert_one_line_error(done, f"tls_client_ca_file (--tls-client-ca) {bundle}", "no PEM")
