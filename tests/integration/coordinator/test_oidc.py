"""A coordinator that takes JWTs of an OIDC issuer: a JWT the issuer signed for us works on
gRPC and REST as its user (an admin by the admin group), a forged one is refused, and one that
expires is refused from then on, saying so."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import httpx
import pytest

from appliance.client import ApplianceClient
from appliance.domain.audit import Door, Outcome
from appliance.domain.errors import Unauthenticated
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer, JwksServer


def test_jwts_of_the_issuer_are_bearer_tokens(tmp_path: Path) -> None:
    issuer = Issuer(tmp_path / "jwks.json")
    running = RunningCoordinator(
        tmp_path / "data", auth_oidc_issuer=ISSUER, auth_oidc_audience=AUDIENCE,
        auth_oidc_jwks_file=issuer.jwks, auth_oidc_admin_group="ops",
    ).start()  # fmt: skip
    try:
        url = f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs"
        alice = issuer.sign()
        with ApplianceClient(running.address, token=alice) as client:
            assert client.list_jobs() == []
        assert httpx.get(url, headers={"Authorization": f"Bearer {alice}"}).status_code == 200
        root = issuer.sign(sub="root", groups=["ops"])
        with ApplianceClient(running.address, token=root) as client:
            assert client.nodes()  # an admin's call

        forged = Issuer(tmp_path / "other.json").sign()
        refused = httpx.get(url, headers={"Authorization": f"Bearer {forged}"})
        assert refused.status_code == 401
        assert "the OIDC token is refused" in refused.json()["error"]["message"]

        brief = issuer.sign(exp=int(time.time()) + 2)
        with ApplianceClient(running.address, token=brief) as client:
            assert client.list_jobs() == []

            def expired() -> bool:
                try:
                    client.list_jobs()
                except (Unauthenticated, grpc.RpcError) as exc:
                    assert "the OIDC token expired at" in str(exc)
                    return True
                return False

            wait_until(expired, 10, "the JWT to expire")
        with (
            ApplianceClient(running.address, token=forged) as client,
            pytest.raises(Unauthenticated),
        ):
            client.list_jobs()

        # Each refused login is on record at its door, as a refusal, never with the JWT.
        def refusals() -> list[tuple[Door, str]]:
            with ApplianceClient(running.address, token=root) as client:
                events = client.audit_events()
            assert not any(jwt in str(e) for e in events for jwt in (forged, brief, alice))
            return sorted((e.door, e.reason) for e in events if e.outcome is Outcome.REFUSED)

        wait_until(lambda: len(refusals()) == 3, 10, "the refused logins' records")
        expected = [
            (Door.GRPC, "UNAUTHENTICATED: the OIDC token expired at"),
            (Door.GRPC, "UNAUTHENTICATED: the OIDC token is refused"),
            (Door.REST, "401: the OIDC token is refused"),
        ]
        for (door, reason), (want_door, start) in zip(refusals(), expected, strict=True):
            assert door is want_door and reason.startswith(start), reason
    finally:
        running.stop()


def test_an_issuer_without_audience_or_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="auth_oidc_issuer needs auth_oidc_audience"):
        RunningCoordinator(tmp_path / "data", auth_oidc_issuer=ISSUER)


def test_the_issuers_keys_can_come_from_its_jwks_url(tmp_path: Path) -> None:
    issuer = Issuer(tmp_path / "jwks.json")
    with JwksServer() as served:
        served.body = issuer.jwks.read_bytes()
        running = RunningCoordinator(
            tmp_path / "data", auth_oidc_issuer=ISSUER, auth_oidc_audience=AUDIENCE,
            auth_oidc_jwks_url=served.url, auth_oidc_ca_file=os.environ["CSCTL_CA"],
        ).start()  # fmt: skip
        try:
            with ApplianceClient(running.address, token=issuer.sign()) as client:
                assert client.list_jobs() == []
            assert served.requests == 1
        finally:
            running.stop()
