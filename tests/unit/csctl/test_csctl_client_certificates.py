"""The client certificate csctl and the client present (mutual TLS): by flag, environment or
cluster entry; half a pair, a key others may read, or a file that is not PEM is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from csctl_runner import Csctl

from appliance.client.client_identity import resolve_identity
from appliance.client.user_config import ConfigError
from appliance.server.pki import CertificateAuthority, write_private


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    issued = ca.issue("alice", [], server=False, client=True)
    cert, key = tmp_path / "alice.crt", tmp_path / "alice.key"
    write_private(cert, issued.cert_pem)
    write_private(key, issued.key_pem)
    return cert, key


def test_flags_then_environment_then_the_cluster(
    pair: tuple[Path, Path], tmp_path: Path, config_file: Path
) -> None:
    cert, key = pair
    other = tmp_path / "other.crt"
    other.write_bytes(cert.read_bytes())
    env = {"CSCTL_CLIENT_CERT": str(other), "CSCTL_CLIENT_KEY": str(key)}
    by_flag = resolve_identity(cert, key, env)
    assert by_flag is not None and by_flag.source == f"{cert} (--client-certificate)"
    by_env = resolve_identity(None, None, env)
    assert by_env is not None and by_env.source == f"{other} ($CSCTL_CLIENT_CERT)"
    assert resolve_identity(None, None, {"CSCTL_CONFIG": str(config_file)}) is None
    done = Csctl(None)(
        "config", "set-cluster", "lab", "--server", "127.0.0.1:1",
        "--client-certificate", str(cert), "--client-key", str(key),
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f"presenting {cert}" in done.output
    entry = yaml.safe_load(config_file.read_text())["clusters"]["lab"]
    assert (entry["client-certificate"], entry["client-key"]) == (str(cert), str(key))
    # Changing the server keeps the pair.
    assert Csctl(None)("config", "set-cluster", "lab", "--server", "127.0.0.1:2").exit_code == 0
    by_cluster = resolve_identity(None, None, {"CSCTL_CONFIG": str(config_file)})
    assert by_cluster is not None
    assert by_cluster.source == f"{cert} (client-certificate of cluster lab in the config file)"
    assert by_cluster.key_pem == key.read_bytes()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--client-certificate", "{cert}"], "--client-certificate is given without --client-key"),
        (["--client-key", "{key}"], "--client-key is given without --client-certificate"),
    ],
)
def test_half_a_pair_is_one_line(
    pair: tuple[Path, Path], config_file: Path, args: list[str], needle: str
) -> None:
    cert, key = pair
    given = [a.format(cert=cert, key=key) for a in args]
    for command in ([*given, "get", "jobs"], ["config", "set-cluster", "lab", *given]):
        refused = Csctl("127.0.0.1:1")(*command)
        assert refused.exit_code == 2, refused.output
        assert refused.output.splitlines() == [f"error: {needle}: give both or neither"]
    with pytest.raises(ConfigError, match=r"\$CSCTL_CLIENT_KEY is given without"):
        resolve_identity(None, None, {"CSCTL_CLIENT_KEY": str(key)})


def test_a_key_others_may_read_is_refused(pair: tuple[Path, Path], config_file: Path) -> None:
    cert, key = pair
    os.chmod(key, 0o644)
    refused = Csctl("127.0.0.1:1")(
        "--client-certificate", str(cert), "--client-key", str(key), "get", "jobs"
    )
    assert refused.exit_code == 2
    assert refused.output.splitlines() == [
        f"error: the client key {key} (--client-key) must not be readable by others: "
        f"chmod 600 {key}"
    ]


@pytest.mark.parametrize(
    ("which", "text", "needle"),
    [
        ("key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n", "is encrypted"),
        ("key", "not a key", "holds no PEM private key"),
        ("key", "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n", "damaged"),
        ("cert", "not a certificate", "holds no PEM certificate"),
        ("cert", "x" * (2 << 20), "is larger than"),
    ],
)
def test_a_file_that_is_not_the_pem_asked_for_names_it(
    pair: tuple[Path, Path], which: str, text: str, needle: str
) -> None:
    cert, key = pair
    write_private(key if which == "key" else cert, text.encode())
    field = "--client-key" if which == "key" else "--client-certificate"
    with pytest.raises(ConfigError) as refused:
        resolve_identity(cert, key, {})
    assert field in str(refused.value) and needle in str(refused.value)
    assert "\n" not in str(refused.value)
