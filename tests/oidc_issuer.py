"""An OIDC issuer a test makes (tests of server/oidc.py): its keys in a JWKS file, and JWTs it
signs, valid for an hour from `now` unless the claims say otherwise."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER, AUDIENCE = "https://issuer.example", "appliance"


class Issuer:
    """An OIDC issuer the test makes: an RSA key (kid `rsa-1`) and an EC key (`ec-1`)."""

    def __init__(self, path: Path, now: float | None = None) -> None:
        self.now = time.time() if now is None else now
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        keys = [
            json.loads(RSAAlgorithm.to_jwk(self.rsa.public_key())) | {"kid": "rsa-1",
                                                                      "alg": "RS256"},
            json.loads(ECAlgorithm.to_jwk(self.ec.public_key())) | {"kid": "ec-1", "alg": "ES256"},
        ]  # fmt: skip
        path.write_text(json.dumps({"keys": keys}))
        self.jwks = path

    def sign(self, alg: str = "RS256", kid: str = "rsa-1", key: Any = None, **claims: Any) -> str:
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "groups": ["nlp"],
                "exp": self.now + 3600, "iat": self.now} | claims  # fmt: skip
        body = {k: v for k, v in body.items() if v is not None}
        signer = key if key is not None else (self.rsa if alg.startswith("RS") else self.ec)
        return jwt.encode(body, signer, algorithm=alg, headers={"kid": kid})
