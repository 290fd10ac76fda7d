"""The settings of the coordinator's TLS (APPLIANCE_TLS_*, APPLIANCE_INSECURE), a part of Settings
(settings.py) kept here so that each file stays one room; taken as `settings.tls`."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

MAX_TLS_NAMES = 32
MAX_NAME_CHARS = 253  # a DNS name's limit


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """How the doors speak TLS. `cert_file`/`key_file` given: those; else a CA in `ca_dir` (made
    on first start, kept) signs a serving certificate for the listened-on addresses and
    `names`. `insecure`: plaintext, allowed on loopback addresses only (checked at start).
    `client_ca_file`: mutual TLS, callers present a certificate of one of its CAs (or of the
    coordinator's own CA: its replicas')."""

    ca_dir: Path
    serving_dir: Path
    cert_file: Path | None = None
    ca_file: Path | None = None
    key_file: Path | None = None
    names: tuple[str, ...] = ()
    insecure: bool = False
    client_ca_file: Path | None = None  # set: callers present a certificate (mutual TLS)


class TlsFields(BaseSettings):
    """APPLIANCE_TLS_* and APPLIANCE_INSECURE: read as fields of Settings (whose model_config
    sets the prefix)."""

    insecure: bool = Field(
        default=False,
        description="Serve gRPC, REST and the dashboard in plaintext (no TLS); allowed only when "
        "listening on a loopback address.",
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM serving certificate (chain) for every door; with tls_key_file. Unset: "
        "a CA in tls_ca_dir signs one. Reloaded when the file changes.",
    )
    tls_key_file: Path | None = Field(default=None, description="PEM key of tls_cert_file.")
    tls_ca_file: Path | None = Field(
        default=None,
        description="PEM CA that signed tls_cert_file, given to replicas to verify the "
        "coordinator; unset = the last certificate of tls_cert_file.",
    )
    tls_ca_dir: Path | None = Field(
        default=None,
        description="Where the coordinator's own CA lives (made on first start, kept across "
        "restarts; share it between coordinators of one cluster); unset = <data_dir>/tls.",
    )
    tls_client_ca_file: Path | None = Field(
        default=None,
        description="PEM bundle of the CAs whose client certificates callers must present "
        "(mutual TLS, as kube-apiserver's --client-ca-file): gRPC refuses a caller without one at "
        "the handshake, HTTPS every path but /healthz and /readyz (the kubelet's probes present "
        "none). Replicas present theirs, of the coordinator's own CA. Reloaded when it changes.",
    )
    tls_names: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated extra DNS names or IP addresses the serving certificate is "
        "for (e.g. the Service's names), beside the addresses it listens on.",
    )

    @field_validator("tls_names", mode="before")
    @classmethod
    def _names_comma_separated(cls, value: object) -> object:
        """`a,b` as the environment gives it. (Named apart from DataFields' validator: the
        same name would override it.)"""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, Sequence) and not isinstance(value, str):
            if len(value) > MAX_TLS_NAMES:
                raise ValueError(f"name at most {MAX_TLS_NAMES} names")
            for name in value:
                check_name(str(name))
        return value

    @model_validator(mode="after")
    def _pair(self) -> TlsFields:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: give both or neither")
        if self.insecure and self.tls_cert_file is not None:
            raise ValueError("insecure turns TLS off: drop tls_cert_file/tls_key_file or it")
        if self.insecure and self.tls_client_ca_file is not None:
            raise ValueError("insecure turns TLS off: drop tls_client_ca_file or it")
        return self


def check_name(name: str) -> str:
    """A DNS name or an IP address for a certificate; ValueError saying what is wrong."""
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"tls_names: {name[:64]!r} must be 1-{MAX_NAME_CHARS} characters")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    labels = name.removeprefix("*.").split(".")
    if not all(
        label and len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
        for label in labels
    ):
        raise ValueError(f"tls_names: {name[:64]!r} is neither an IP address nor a DNS name")
    return name
