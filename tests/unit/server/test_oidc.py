"""OIDC JWTs as bearer tokens: a JWT signed by a key of the issuer's JWKS file, for our audience,
from our issuer, names its user and groups (admins by the admin group); anything else is
refused in one line: another issuer or audience, another key, `none`, an HMAC made with the
public key, a missing or past expiry (by the injected wall clock), a hostile user claim. Tokens
of the tokens file keep working beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from appliance.config.groups import OidcSettings
from appliance.domain.auth import Principal
from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator, create_token
from appliance.server.oidc import OidcVerifier
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer
from tests.unit.harness import NOW, Clock


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    return Issuer(tmp_path / "jwks.json", NOW)


def _auth(issuer: Issuer, wall: Clock, tokens_file: Path | None = None) -> Authenticator:
    settings = OidcSettings(ISSUER, AUDIENCE, issuer.jwks, admin_group="ops")
    return Authenticator.from_file(tokens_file, wall, oidc=OidcVerifier(settings))


def test_a_jwt_of_the_issuer_names_its_user_and_groups(issuer: Issuer, tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    kept = create_token(tokens_file, "bob", ["cv"], admin=False)
    auth = _auth(issuer, Clock(NOW), tokens_file)
    assert auth.enabled
    assert auth.principal(f"Bearer {issuer.sign()}") == Principal("alice", ("nlp",), False)
    admin = issuer.sign("ES256", "ec-1", sub="carol", groups=["nlp", "ops"])
    assert auth.principal(f"Bearer {admin}") == Principal("carol", ("nlp", "ops"), True)
    assert auth.principal(f"Bearer {kept}").user == "bob"  # the tokens file still counts


def test_oidc_alone_turns_authentication_on(issuer: Issuer) -> None:
    auth = _auth(issuer, Clock(NOW))
    assert auth.enabled
    with pytest.raises(Unauthenticated, match="not recognised"):
        auth.principal("Bearer not-a-jwt")


def test_a_jwt_is_refused_once_it_expires(issuer: Issuer) -> None:
    wall = Clock(NOW)
    auth = _auth(issuer, wall)
    token = issuer.sign(exp=NOW + 60)
    assert auth.principal(f"Bearer {token}").user == "alice"
    wall.now = NOW + 60
    with pytest.raises(Unauthenticated, match=r"the OIDC token expired at 2023-11-14T22:14:20Z"):
        auth.principal(f"Bearer {token}")


def _public_pem(issuer: Issuer) -> bytes:
    return issuer.rsa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.mark.parametrize(
    ("forge", "said"),
    [
        (lambda i: i.sign(iss="https://evil.example"), "Invalid issuer"),
        (lambda i: i.sign(aud="other"), "Audience doesn't match"),
        (lambda i: i.sign(exp=None), "exp"),
        (lambda i: i.sign(exp=NOW - 1), "expired at"),
        (lambda i: i.sign(nbf=NOW + 600), "not valid before"),
        (lambda i: i.sign(sub=None), "'sub'"),
        (lambda i: i.sign(sub="../root"), "a user or group"),
        (lambda i: i.sign(groups="ops"), "must be a list"),
        (lambda i: i.sign(groups=["g"] * 1000), "must be a list"),
        (lambda i: i.sign(kid="rsa-2"), "no key 'rsa-2'"),
        (lambda i: i.sign("ES256", "rsa-1"), "is for RS256, not ES256"),
        (lambda i: i.sign(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
         "Signature verification failed"),
        (lambda i: jwt.encode({"sub": "root", "iss": ISSUER, "aud": AUDIENCE, "exp": NOW + 60},
                              None, algorithm="none", headers={"kid": "rsa-1"}), "'none'"),
        (lambda i: i.sign("HS256", key=_public_pem(i)), "'HS256' is not accepted"),
        (lambda i: "e30" * 6000 + ".x.y", "longer than"),
        (lambda i: "a.b.c", "refused"),
    ],
)  # fmt: skip
def test_forged_and_hostile_jwts_are_refused_in_one_line(
    issuer: Issuer, forge: Any, said: str
) -> None:
    auth = _auth(issuer, Clock(NOW))
    try:
        token = forge(issuer)
    except jwt.exceptions.InvalidKeyError:  # PyJWT itself will not make an HMAC of a PEM key
        token = _hmac_with_public_key(issuer)
    with pytest.raises(Unauthenticated) as refused:
        auth.principal(f"Bearer {token}")
    assert said in refused.value.message and "\n" not in refused.value.message


def _hmac_with_public_key(issuer: Issuer) -> str:
    import base64
    import hashlib
    import hmac

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}).encode())
    body = part(json.dumps({"sub": "root", "iss": ISSUER, "aud": AUDIENCE,
                            "exp": NOW + 60}).encode())  # fmt: skip
    signed = hmac.new(_public_pem(issuer), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(signed)}"


def test_a_jwks_file_that_cannot_be_read_refuses_every_jwt(issuer: Issuer) -> None:
    clock = Clock(NOW)
    verifier = OidcVerifier(OidcSettings(ISSUER, AUDIENCE, issuer.jwks), clock)
    auth = Authenticator.from_file(None, Clock(NOW), oidc=verifier)
    token = issuer.sign()
    assert auth.principal(f"Bearer {token}").user == "alice"
    issuer.jwks.write_text("{not json")
    clock.now += 1
    with pytest.raises(Unauthenticated, match="no key 'rsa-1'"):
        auth.principal(f"Bearer {token}")
