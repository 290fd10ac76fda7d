"""Mutual TLS on a real coordinator's doors (`tls_client_ca_file`): callers present a certificate
of a client CA, its replicas theirs of its own CA; the probes' paths need none; the bundle is
followed on disk."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from appliance.client import ApplianceClient
from appliance.config import Settings
from appliance.domain.audit import AuditEvent, AuditQuery, Door, Outcome
from appliance.domain.errors import Unavailable
from appliance.domain.phases import Phase
from appliance.server.app import Coordinator, StartupError
from appliance.server.pki import CertificateAuthority, write_private
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}


def client_files(ca: CertificateAuthority, directory: Path, name: str) -> tuple[Path, Path]:
    """A client certificate of `ca` and its key (0600), as files."""
    issued = ca.issue(name, [], server=False, client=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    write_private(cert, issued.cert_pem)
    write_private(key, issued.key_pem)
    return cert, key


@dataclasses.dataclass
class Mutual:
    """A coordinator trusting the clients' CA, a client certificate of it and one of another
    CA, and both CAs."""

    running: RunningCoordinator
    good: tuple[Path, Path]
    other: tuple[Path, Path]
    cas: tuple[CertificateAuthority, CertificateAuthority]

    @property
    def address(self) -> str:
        return self.running.address


@pytest.fixture
def mutual(tmp_path: Path) -> Iterator[Mutual]:
    cas = (
        CertificateAuthority.load_or_create(tmp_path / "clients-ca"),
        CertificateAuthority.load_or_create(tmp_path / "other-ca"),
    )
    bundle = tmp_path / "client-cas.pem"
    bundle.write_bytes(cas[0].cert_pem)
    good, other = client_files(cas[0], tmp_path, "alice"), client_files(cas[1], tmp_path, "bob")
    with serving(tmp_path / "data", tls_client_ca_file=bundle) as running:
        yield Mutual(running, good, other, cas)


def lists(mutual: Mutual, pair: tuple[Path, Path] | None) -> str:
    """'ok' when a new connection presenting `pair` may list jobs, else the client's line."""
    cert, key = pair or (None, None)
    try:
        with ApplianceClient(mutual.address, timeout=5, client_cert=cert, client_key=key) as c:
            c.list_jobs()
    except Unavailable as exc:
        return exc.message
    return "ok"


def https_get(mutual: Mutual, path: str, pair: tuple[Path, Path] | None) -> int:
    context = ssl.create_default_context(cafile=os.environ["CSCTL_CA"])
    if pair is not None:
        context.load_cert_chain(*pair)
    url = f"https://127.0.0.1:{mutual.running.coordinator.http_port}{path}"
    return httpx.get(url, verify=context, timeout=10).status_code


def test_callers_present_a_certificate_of_the_client_ca(mutual: Mutual) -> None:
    good, other = mutual.good, mutual.other
    address = mutual.address
    assert lists(mutual, good) == "ok"
    assert lists(mutual, None) == (
        f"the appliance at {address} requires a client certificate: give --client-certificate/"
        "--client-key, $CSCTL_CLIENT_CERT/$CSCTL_CLIENT_KEY or `csctl config set-cluster "
        "--client-certificate FILE --client-key FILE`"
    )
    assert lists(mutual, other).startswith(
        f"the appliance at {address} refused the client certificate {other[0]} "
        "(--client-certificate): it is not signed by a CA the appliance trusts"
    )
    # HTTPS: REST and the dashboard need one; the kubelet's probes present none and pass.
    assert https_get(mutual, "/api/v1/jobs", good) == 200
    assert https_get(mutual, "/", good) in (200, 302, 303, 307)
    assert https_get(mutual, "/api/v1/jobs", None) == 401
    assert https_get(mutual, "/", None) == 401
    assert https_get(mutual, "/healthz", None) == 200
    assert https_get(mutual, "/readyz", None) == 200
    with pytest.raises(httpx.HTTPError):  # another CA's: refused at the handshake
        https_get(mutual, "/healthz", other)
    # A forwarded-for header cannot lend a connection a certificate.
    context = ssl.create_default_context(cafile=os.environ["CSCTL_CA"])
    url = f"https://127.0.0.1:{mutual.running.coordinator.http_port}/api/v1/jobs"
    spoofed = httpx.get(url, verify=context, headers={"X-Forwarded-For": "127.0.0.1:1"})
    assert spoofed.status_code == 401
    # The refusals are on record, coalesced (no one is known yet: no token was read).
    store = mutual.running.coordinator.ctx.store

    def refusals() -> list[AuditEvent]:
        found = store.audit_events(AuditQuery(limit=1000))
        return [e for e in found if "client certificate" in e.reason]

    wait_until(lambda: bool(refusals()), 10, "the client-certificate refusals' record")
    first = refusals()[-1]
    assert (first.door, first.outcome, first.user) == (Door.REST, Outcome.REFUSED, "")
    assert first.source.startswith("127.0.0.1:")


def test_csctl_presents_its_certificate_or_says_in_one_line_it_must(
    mutual: Mutual, tmp_path: Path
) -> None:
    cert, key = mutual.good
    config = {"CSCTL_CONFIG": str(tmp_path / "csctl.yaml")}
    (tmp_path / "csctl.yaml").write_text("{}\n")
    server = ["--server", mutual.address]
    runner = CliRunner()
    done = runner.invoke(
        cli, [*server, "--client-certificate", str(cert), "--client-key", str(key), "get", "jobs"],
        env=config,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    refused = runner.invoke(cli, [*server, "get", "jobs"], env=config)
    assert refused.exit_code == 1
    assert refused.output.splitlines() == [
        f"error: the appliance at {mutual.address} requires a client certificate: give "
        "--client-certificate/--client-key, $CSCTL_CLIENT_CERT/$CSCTL_CLIENT_KEY or `csctl "
        "config set-cluster --client-certificate FILE --client-key FILE`"
    ]
    by_env = {**config, "CSCTL_CLIENT_CERT": str(cert), "CSCTL_CLIENT_KEY": str(key)}
    assert runner.invoke(cli, [*server, "get", "jobs"], env=by_env).exit_code == 0
    set_cluster = ["config", "set-cluster", "lab", "--server", mutual.address,
                   "--certificate-authority", os.environ["CSCTL_CA"],
                   "--client-certificate", str(cert), "--client-key", str(key)]  # fmt: skip
    assert runner.invoke(cli, set_cluster, env=config).exit_code == 0
    from_cluster = runner.invoke(cli, ["get", "jobs"], env={**config, "CSCTL_SERVER": ""})
    assert from_cluster.exit_code == 0, from_cluster.output


def test_a_job_runs_to_the_end_with_its_replicas_under_mutual_tls(mutual: Mutual) -> None:
    """Replicas present their own certificates (of the coordinator's CA) to its control service."""
    cert, key = mutual.good
    with ApplianceClient(mutual.address, detach=True, client_cert=cert, client_key=key) as c:
        job = c.submit(params=PARAMS, num_csx=1, num_steps=5)
        assert job.wait(timeout=120).phase is Phase.SUCCEEDED


def test_the_client_ca_bundle_is_followed_on_disk(mutual: Mutual) -> None:
    first, second, cas = mutual.good, mutual.other, mutual.cas
    bundle = mutual.running.settings.tls.client_ca_file
    assert bundle is not None
    assert lists(mutual, first) == "ok"
    assert lists(mutual, second) != "ok"
    bundle.write_bytes(cas[1].cert_pem)  # the CA rotated: the new one only
    wait_until(lambda: lists(mutual, second) == "ok", 15, "the new client CA (gRPC)")
    wait_until(lambda: https_get(mutual, "/api/v1/jobs", second) == 200, 15, "(HTTPS)")
    assert lists(mutual, first) != "ok"
    with pytest.raises(httpx.HTTPError):
        https_get(mutual, "/api/v1/jobs", first)
    bundle.write_text("not a certificate")  # a half-done copy: the last good bundle serves
    tls = mutual.running.coordinator.tls
    assert tls is not None and not tls.refresh()
    assert lists(mutual, second) == "ok"
    bundle.write_bytes(cas[0].cert_pem + cas[1].cert_pem)  # a bundle of both
    wait_until(lambda: lists(mutual, first) == "ok", 15, "the bundle of both")
    assert lists(mutual, second) == "ok"


def test_a_bad_client_ca_file_is_one_line_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "client-cas.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    for given, needle in ((bad, "holds no PEM certificate"), (tmp_path / "none", "No such")):
        settings = Settings(data_dir=tmp_path / "data", grpc_port=0, http_port=0,
                            tls_client_ca_file=given)  # fmt: skip
        with pytest.raises(StartupError) as refused:
            asyncio.run(Coordinator(settings).start())
        line = str(refused.value)
        assert line.startswith("cannot serve TLS: tls_client_ca_file (--tls-client-ca)"), line
        assert needle in line and "\n" not in line
