"""JWTs from an OIDC issuer, taken as the Kubernetes API server's structured authentication
takes them: signed by a key of the issuer's JWKS (a file the admin keeps current, or the
issuer's JWKS URL: server/jwks.py), for our
audience, from our issuer, not expired; the user is one claim (`sub` by default) and the groups
another (`groups`); members of the admin group are admins.

Only asymmetric signatures are accepted (RS*, PS*, ES*, EdDSA): never `none`, never an HMAC
(whose "secret" would be the public key anyone can read). Expiry is judged by the wall clock
the Authenticator is given, so a stream open with a JWT ends when the JWT expires, as with a
token of the tokens file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import jwt

from appliance.config.groups import OidcSettings
from appliance.domain.auth import Principal
from appliance.domain.errors import ApplianceError, Unauthenticated
from appliance.domain.spec import validate_user
from appliance.server.jwks import ALGORITHMS, JwksFile, JwksUrl, KeySource
from appliance.server.tokens_file import iso

log = logging.getLogger(__name__)

MAX_JWT_BYTES = 16 * 1024
MAX_GROUPS = 256


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class OidcVerifier:
    """Checks a JWT against the issuer's keys and says who it names."""

    def __init__(
        self,
        settings: OidcSettings,
        clock: Callable[[], float] = time.monotonic,
        keys: KeySource | None = None,
    ) -> None:
        """`keys`: where the issuer's keys come from (default: as `settings` say)."""
        self._settings = settings
        self._source = keys if keys is not None else key_source(settings, clock)

    def close(self) -> None:
        self._source.close()

    def principal(self, token: str, now: float) -> Principal:
        """Who the JWT names; Unauthenticated (one line) when it is not one of ours, not
        signed by the issuer, or expired."""
        if len(token) > MAX_JWT_BYTES:
            raise _refused(f"it is longer than {MAX_JWT_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
            key = self._key(header)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                audience=self._settings.audience,
                issuer=self._settings.issuer,
                # Expiry by our wall clock, below; present it must be.
                options={"require": ["exp", "iss", "aud"], "verify_exp": False,
                         "verify_nbf": False, "verify_iat": False},
            )  # fmt: skip
        except jwt.PyJWTError as exc:
            raise _refused(str(exc)[:200]) from None
        return self._checked_claims(claims, now)

    def _key(self, header: dict[str, Any]) -> jwt.PyJWK:
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise _refused(f"its algorithm {str(alg)[:20]!r} is not accepted")
        kid = header.get("kid")
        keys = self._source.held()
        if kid is None and len(keys) == 1:
            key = next(iter(keys.values()))
        else:
            found = keys.get(str(kid))
            if found is None:
                self._source.unknown()  # the issuer may have rotated: fetched again soon
                raise _refused(f"no key {str(kid)[:64]!r} in the issuer's JWKS")
            key = found
        if key.algorithm_name != alg:
            raise _refused(f"key {str(kid)[:64]!r} is for {key.algorithm_name}, not {alg}")
        return key

    def _checked_claims(self, claims: dict[str, Any], now: float) -> Principal:
        exp, nbf = _time(claims, "exp"), _time(claims, "nbf", 0.0)
        if now >= exp:
            raise Unauthenticated(f"the OIDC token expired at {iso(exp)}; sign in again")
        if now < nbf:
            raise _refused(f"it is not valid before {iso(nbf)}")
        user, groups = (
            claims.get(self._settings.user_claim),
            claims.get(self._settings.groups_claim),
        )
        if not isinstance(user, str):
            raise _refused(f"claim {self._settings.user_claim!r} (the user) is missing")
        if groups is None:
            groups = []
        if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
            raise _refused(f"claim {self._settings.groups_claim!r} must be a list of groups")
        try:
            validate_user(user)
            named = tuple(validate_user(str(g)) for g in groups)
        except ApplianceError as exc:
            raise _refused(f"a user or group in it: {exc.message}") from None
        admin = bool(self._settings.admin_group) and self._settings.admin_group in named
        return Principal(user=user, groups=named, admin=admin)


def key_source(settings: OidcSettings, clock: Callable[[], float]) -> KeySource:
    if settings.jwks_url:
        return JwksUrl(settings.jwks_url, settings.jwks_ca_file)
    assert settings.jwks_file is not None  # settings.py: one of the two
    return JwksFile(settings.jwks_file, clock)


def _time(claims: dict[str, Any], name: str, default: float | None = None) -> float:
    value = claims.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _refused(f"{name} must be a number")
    return float(value)


def _refused(why: str) -> Unauthenticated:
    return Unauthenticated(f"the OIDC token is refused: {why}")
