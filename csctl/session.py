"""What every csctl command shares: the resolved server, one client, one way to fail."""

from __future__ import annotations

import dataclasses
import os
from typing import IO, Any, NoReturn

import click

from appliance.client import ApplianceClient
from appliance.client.user_config import (
    ConfigError,
    ServerAddress,
    exposure_warning,
    resolve_server,
    resolve_token,
)
from appliance.domain.display import printable
from appliance.domain.errors import ApplianceError, NotFound


class CsctlError(click.ClickException):
    """A failure shown to the user as one `error: ...` line; exit status 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {printable(self.format_message())}", err=True, file=file)


class CsctlConfigError(CsctlError):
    """A configuration mistake (bad address, unreadable config file); exit status 2."""

    exit_code = 2


def fail(error: ApplianceError | TimeoutError) -> NoReturn:
    """Stop with the error's sentence and exit status 1."""
    raise CsctlError(error_line(error)) from None


def error_line(error: ApplianceError | TimeoutError) -> str:
    """The error's sentence, and for a job that does not exist, how to list those that do."""
    if not isinstance(error, ApplianceError):
        return str(error)
    if isinstance(error, NotFound) and error.field == "job_id":
        return f"{error.message}; list jobs with `csctl get jobs -a`"
    return error.message


@dataclasses.dataclass
class Session:
    """Per-invocation state: the `--server` flag and, once needed, one client."""

    server_flag: str | None
    token_flag: str | None = None
    ca_flag: str | None = None
    insecure_flag: bool | None = None
    client_cert_flag: str | None = None
    client_key_flag: str | None = None
    _client: ApplianceClient | None = None
    _server: ServerAddress | None = None

    @property
    def server(self) -> ServerAddress:
        """The resolved server address (flag, environment, config file, default)."""
        if self._server is None:
            try:
                self._server = resolve_server(self.server_flag, os.environ)
            except ConfigError as exc:
                raise CsctlConfigError(str(exc)) from None
        return self._server

    def client(self) -> ApplianceClient:
        """The client for this invocation, created on first use and closed at exit."""
        if self._client is None:
            try:
                token = resolve_token(self.token_flag, os.environ)
            except ConfigError as exc:
                raise CsctlConfigError(str(exc)) from None
            if token is not None and token.file is not None:
                warning = exposure_warning(token.file)
                if warning:
                    click.echo(printable(warning), err=True)
            value = token.value if token is not None else None
            try:
                self._client = ApplianceClient(
                    self.server.address,
                    token=value,
                    ca=self.ca_flag,
                    insecure=self.insecure_flag,
                    client_cert=self.client_cert_flag,
                    client_key=self.client_key_flag,
                )
            except ConfigError as exc:
                raise CsctlConfigError(str(exc)) from None
            click.get_current_context().call_on_close(self._client.close)
        return self._client
