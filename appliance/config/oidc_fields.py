"""The settings of OIDC authentication (APPLIANCE_AUTH_OIDC_*), a part of Settings (settings.py)
kept here so that each file stays one room; taken through `settings.auth.oidc`."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

from appliance.config.groups import OidcSettings
from appliance.domain.auth import is_loopback


class OidcFields(BaseSettings):
    """APPLIANCE_AUTH_OIDC_*: read as fields of Settings (whose model_config sets the prefix)."""

    auth_oidc_issuer: str = Field(
        default="",
        max_length=2048,
        description="Accept JWTs from this OIDC issuer (their `iss`); needs the audience and "
        "the JWKS file or URL; turns authentication on.",
    )
    auth_oidc_audience: str = Field(
        default="", max_length=2048, description="The `aud` OIDC tokens must carry."
    )
    auth_oidc_jwks_file: Path | None = Field(
        default=None, description="The issuer's keys (a JWKS JSON file), followed on change."
    )
    auth_oidc_jwks_url: str = Field(
        default="",
        max_length=2048,
        description="The issuer's keys at a URL (https://; http:// only to a loopback "
        "address), fetched every 5 minutes and soon after a token names an unknown key; "
        "instead of the file.",
    )
    auth_oidc_ca_file: Path | None = Field(
        default=None,
        description="CA certificates (PEM) that verify the JWKS URL's server; unset: the "
        "system's.",
    )
    auth_oidc_user_claim: str = Field(
        default="sub", max_length=256, description="The claim that names the user."
    )
    auth_oidc_groups_claim: str = Field(
        default="groups", max_length=256, description="The claim listing the user's groups."
    )
    auth_oidc_admin_group: str = Field(
        default="", max_length=253, description="Members of this group are admins."
    )

    @model_validator(mode="after")
    def _oidc_is_whole(self) -> OidcFields:
        """An OIDC issuer needs its audience and its keys, from one place."""
        if not self.auth_oidc_issuer:
            return self
        if not self.auth_oidc_audience:
            raise ValueError("auth_oidc_issuer needs auth_oidc_audience as well")
        if bool(self.auth_oidc_jwks_file) == bool(self.auth_oidc_jwks_url):
            raise ValueError(
                "auth_oidc_issuer needs one of auth_oidc_jwks_file and auth_oidc_jwks_url"
            )
        if self.auth_oidc_jwks_url:
            _check_url(self.auth_oidc_jwks_url)
        return self

    @property
    def oidc(self) -> OidcSettings | None:
        if not self.auth_oidc_issuer:
            return None
        return OidcSettings(
            self.auth_oidc_issuer, self.auth_oidc_audience, self.auth_oidc_jwks_file,
            self.auth_oidc_user_claim, self.auth_oidc_groups_claim, self.auth_oidc_admin_group,
            self.auth_oidc_jwks_url, self.auth_oidc_ca_file,
        )  # fmt: skip


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return
    raise ValueError(
        "auth_oidc_jwks_url must be an https:// URL (http:// only to a loopback address): "
        "keys fetched in the clear could be anyone's"
    )
