"""An OIDC issuer a test makes (tests of server/oidc.py): its keys in a JWKS file, and JWTs it
signs, valid for an hour from `now` unless the claims say otherwise; and a real HTTPS server on
127.0.0.1 that serves a JWKS (the issuer's JWKS URL)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.tls import server_ssl_context

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


class JwksServer(http.server.ThreadingHTTPServer):
    """Serves `body` (with `status`) at /jwks, over TLS; counts the requests."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.socket = server_ssl_context().wrap_socket(self.socket, server_side=True)
        self.body = b"{}"
        self.status = 200
        self.location = ""
        self.cut = 0  # bytes promised in Content-Length but never sent (a cut-off body)
        self.requests = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/jwks"

    def __enter__(self) -> JwksServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: JwksServer

    def do_GET(self) -> None:
        self.server.requests += 1
        self.send_response(self.server.status)
        if self.server.location:
            self.send_header("Location", self.server.location)
        self.send_header("Content-Length", str(len(self.server.body) + self.server.cut))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args: Any) -> None:
        pass
