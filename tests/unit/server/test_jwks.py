"""An OIDC issuer's keys from its JWKS URL (server/jwks.py), served by a real HTTPS server on
127.0.0.1 with a certificate of the session's CA: fetched at start and used; fetched again soon
after a JWT names a key not held (a rotation), but never at a caller's pace; a fetch that
fails (an error status, a body over the bound, a redirect, an untrusted server) keeps the keys
held and is said in one line; the URL must be HTTPS (plain HTTP to loopback alone)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.config.groups import OidcSettings
from appliance.config.settings import Settings
from appliance.domain.errors import Unauthenticated
from appliance.server.jwks import MAX_JWKS_BYTES, JwksUrl
from appliance.server.oidc import OidcVerifier
from tests.integration.coordinator.harness import wait_until
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer, JwksServer


@pytest.fixture
def served() -> Iterator[JwksServer]:
    with JwksServer() as server:
        yield server


def _ca() -> Path:
    return Path(os.environ["CSCTL_CA"])


@pytest.fixture
def issuer(served: JwksServer, tmp_path: Path) -> Issuer:
    """An issuer whose keys the server serves."""
    made = Issuer(tmp_path / "jwks.json")
    served.body = made.jwks.read_bytes()
    return made


def _verifier(served: JwksServer, **timing: float) -> tuple[OidcVerifier, JwksUrl]:
    source = JwksUrl(served.url, _ca(), **timing)
    settings = OidcSettings(ISSUER, AUDIENCE, None, jwks_url=served.url, jwks_ca_file=_ca())
    return OidcVerifier(settings, keys=source), source


def test_keys_fetched_from_the_url_check_its_jwts_and_a_rotation_is_fetched_soon(
    served: JwksServer, issuer: Issuer, tmp_path: Path
) -> None:
    verifier, source = _verifier(served, min_refetch=0.05)
    try:
        assert verifier.principal(issuer.sign(), issuer.now).user == "alice"

        rotated = Issuer(tmp_path / "rotated.json", issuer.now)  # new keys, same kids
        keys = json.loads(rotated.jwks.read_text())["keys"]
        served.body = json.dumps({"keys": [k | {"kid": f"{k['kid']}-2"} for k in keys]}).encode()
        token = rotated.sign(kid="rsa-1-2")
        with pytest.raises(Unauthenticated, match="no key 'rsa-1-2'"):
            verifier.principal(token, issuer.now)  # not held yet: refused, and fetched soon
        wait_until(lambda: "rsa-1-2" in source.held(), 10, "the rotated keys")
        assert verifier.principal(token, issuer.now).user == "alice"
        with pytest.raises(Unauthenticated, match="no key 'rsa-1'"):
            verifier.principal(issuer.sign(), issuer.now)  # the old key is gone
    finally:
        verifier.close()


def test_unknown_keys_never_make_it_fetch_at_the_callers_pace(
    served: JwksServer, issuer: Issuer, tmp_path: Path
) -> None:
    verifier, _ = _verifier(served, min_refetch=3600)
    try:
        for i in range(200):
            with pytest.raises(Unauthenticated):
                verifier.principal(issuer.sign(kid=f"forged-{i}"), issuer.now)
        assert served.requests == 1  # the start's fetch only
    finally:
        verifier.close()


@pytest.mark.parametrize(
    ("status", "body", "location", "said"),
    [
        (500, b"{}", "", "HTTP 500"),
        (200, b"x" * (MAX_JWKS_BYTES + 1), "", "larger than"),
        (200, b"not json", "", "cannot read the OIDC JWKS"),
        (200, b'{"keys": []}', "", "did not contain any keys"),
        (302, b"", "http://127.0.0.1:1/jwks", "HTTP 302"),
        (200, b"[]", "", "not a JSON object"),
        (200, b'{"keys": [', "cut", "cut off"),
    ],
    ids=["error-status", "too-large", "not-json", "no-keys", "redirect", "not-an-object", "cut"],
)
def test_a_failed_fetch_keeps_the_keys_held_and_is_said_once(
    served: JwksServer,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
    status: int,
    body: bytes,
    location: str,
    said: str,
) -> None:
    verifier, source = _verifier(served, min_refetch=0.01, retry=0.01)
    try:
        assert verifier.principal(issuer.sign(), issuer.now).user == "alice"
        with caplog.at_level(logging.ERROR, logger="appliance.server.jwks"):
            served.status, served.body = status, body
            if location == "cut":  # the connection ends before the body it promised
                served.cut = 100
            else:
                served.location = location
            before = source.fetches
            source.unknown()
            wait_until(lambda: source.fetches >= before + 3, 10, "fetches that fail")
        assert verifier.principal(issuer.sign(), issuer.now).user == "alice"  # still held
        lines = [r.getMessage() for r in caplog.records if said in r.getMessage()]
        assert len(lines) == 1, caplog.text  # once, however often retried
        assert "\n" not in lines[0]
    finally:
        verifier.close()


def test_a_server_the_ca_does_not_vouch_for_gives_no_keys(
    served: JwksServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "other-ca.pem"
    from appliance.server.pki import CertificateAuthority

    other.write_bytes(CertificateAuthority.load_or_create(tmp_path / "other").cert_pem)
    served.body = Issuer(tmp_path / "jwks.json").jwks.read_bytes()
    with caplog.at_level(logging.ERROR, logger="appliance.server.jwks"):
        source = JwksUrl(served.url, other, first_wait=10)
    try:
        assert source.held() == {}
        assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
        assert served.requests == 0  # no request was sent to it
    finally:
        source.close()


@pytest.mark.parametrize(
    "url",
    ["http://issuer.example/jwks", "ftp://127.0.0.1/jwks", "file:///etc/passwd", "https://"],
)
def test_the_url_must_be_https_or_loopback_http(url: str) -> None:
    with pytest.raises(ValidationError, match="auth_oidc_jwks_url must be an https://"):
        Settings(auth_oidc_issuer=ISSUER, auth_oidc_audience=AUDIENCE, auth_oidc_jwks_url=url)
    Settings(
        auth_oidc_issuer=ISSUER, auth_oidc_audience=AUDIENCE,
        auth_oidc_jwks_url="http://127.0.0.1:8443/jwks",
    )  # fmt: skip


def test_the_file_and_the_url_are_not_both_given(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="one of auth_oidc_jwks_file and auth_oidc_jwks_url"):
        Settings(
            auth_oidc_issuer=ISSUER, auth_oidc_audience=AUDIENCE,
            auth_oidc_jwks_file=tmp_path / "jwks.json", auth_oidc_jwks_url="https://x/jwks",
        )  # fmt: skip
