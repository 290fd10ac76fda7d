"""Bearer tokens: a file of hashed tokens mapped to users, groups and an admin flag.

The file (Settings.auth_tokens_file, YAML) is written by `appliance token create`; it holds only
SHA-256 digests, never a token, and tokens are never logged. Without the file, authentication
is off and every caller is an admin acting as the user it names.

    tokens:
      - user: alice
        groups: [nlp]
        admin: false
        sha256: 9f86d08...
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import yaml

from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import Unauthenticated


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    def __init__(self, principals: dict[str, Principal] | None = None) -> None:
        """`principals` maps token digests to principals; None turns authentication off."""
        self._principals = principals

    @property
    def enabled(self) -> bool:
        return self._principals is not None

    @classmethod
    def from_file(cls, path: Path | None) -> Authenticator:
        if path is None:
            return cls(None)
        try:
            entries = (yaml.safe_load(path.read_text()) or {}).get("tokens") or []
            principals = {
                str(e["sha256"]): Principal(
                    user=str(e["user"]),
                    groups=tuple(str(g) for g in e.get("groups") or ()),
                    admin=bool(e.get("admin", False)),
                )
                for e in entries
            }
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"cannot read the tokens file {path}: {exc}") from None
        return cls(principals)

    def caller(self, authorization: str | None) -> Principal | None:
        """The authenticated caller, or None when authentication is off."""
        return self.principal(authorization) if self.enabled else None

    def principal(self, authorization: str | None, claimed_user: str = "") -> Principal:
        """Who calls, from an `Authorization: Bearer <token>` value."""
        if self._principals is None:
            return Principal(user=claimed_user or ANONYMOUS_USER, admin=True)
        token = bearer_token(authorization)
        if token is None:
            raise Unauthenticated(
                "authentication is required: pass a token (csctl --token, CSCTL_TOKEN, or "
                "ApplianceClient(token=...))"
            )
        wanted = digest(token)
        for known, principal in self._principals.items():
            if hmac.compare_digest(known, wanted):
                return principal
        raise Unauthenticated("the token is not recognised; ask an admin for a valid one")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None if there is none."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def create_token(path: Path, user: str, groups: Sequence[str], admin: bool) -> str:
    """Add a new token for `user` to the tokens file (created 0600) and return it."""
    token = secrets.token_urlsafe(32)
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    entries = list((data or {}).get("tokens") or [])
    entries.append({"user": user, "groups": list(groups), "admin": admin, "sha256": digest(token)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"tokens": entries}, f, sort_keys=False)
    return token
