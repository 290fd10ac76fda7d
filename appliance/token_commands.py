"""`appliance token ...`: make, list, revoke and rotate the bearer tokens of a tokens file
(format: server/tokens_file.py). A token is printed once, when it is made; `list` shows ids,
principals and times, never a token or a digest. The coordinator follows the file: a revoked
or expired token is refused within about a second, open streams included.

Each create, revoke and rotate is a record of the audit log (services/audit_local.py) in the
store the settings name (APPLIANCE_DATA_DIR or --data-dir, APPLIANCE_DATABASE_URL), as the
OS user who ran it. A change that cannot be recorded there is refused, unless --no-audit says
to make it anyway (a warning says it was not recorded): accountability by default, and a way
to revoke a leaked token while the store is down. With no store yet (the first token, before
the coordinator first ran) the change is made and the warning says so."""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from appliance.config import Settings
from appliance.domain.audit import AuditEvent, Door, Outcome
from appliance.domain.auth import Principal
from appliance.domain.errors import ApplianceError
from appliance.domain.spec import validate_user
from appliance.server.tokens_file import (
    DEFAULT_TTL,
    TokenEntry,
    add_token,
    find_entry,
    iso,
    parse_ttl,
    read_entries,
    revoke_token,
    rotate_token,
)
from appliance.services.audit import request_id
from appliance.services.audit_local import AuditUnavailable, LocalAudit, NoStoreYet

F = TypeVar("F", bound=Callable[..., object])
_MAX_ID = 64


def _file_option(command: F) -> F:
    return click.option(
        "--file",
        "path",
        type=click.Path(path_type=Path, dir_okay=False),
        required=True,
        envvar="APPLIANCE_AUTH_TOKENS_FILE",
        help="The tokens file [env: APPLIANCE_AUTH_TOKENS_FILE].",
    )(command)


def _audit_options(command: F) -> F:
    command = click.option(
        "--no-audit",
        is_flag=True,
        help="Make the change even if the audit log cannot record it (a warning says so).",
    )(command)
    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="The coordinator's data dir, whose store holds the audit log "
        "[default: .appliance, or APPLIANCE_DATA_DIR].",
    )(command)


class _Audit:
    """The audit log a command records its change in, opened before the change is made."""

    def __init__(self, data_dir: Path | None, no_audit: bool) -> None:
        self.log: LocalAudit | None = None
        try:
            given: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
            settings = Settings(**given)
            self.log = LocalAudit.open(settings.store, settings.audit)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise click.ClickException(f"settings: {first['loc']}: {first['msg']}") from None
        except NoStoreYet as exc:
            _warn(f"{exc}: the change is not recorded in the audit log")
        except AuditUnavailable as exc:
            if not no_audit:
                raise click.ClickException(
                    f"nothing changed: the change could not be audited ({exc}); fix that, "
                    "or pass --no-audit to make it unrecorded"
                ) from None
            _warn(f"{exc}: the change is not recorded in the audit log (--no-audit)")

    def record(self, verb: str, token_id: str, what: str, refused: str = "") -> None:
        if self.log is None:
            return
        event = AuditEvent(
            at=0.0, request_id=request_id(None), user=_os_user(), groups=(), admin=True,
            source="local", door=Door.CLI, verb=verb, object_kind="token",
            object_name=token_id, outcome=Outcome.REFUSED if refused else Outcome.ALLOWED,
            reason=refused or what,
        )  # fmt: skip
        try:
            self.log.record(event)
        except AuditUnavailable as exc:
            _warn(f"the change was made but not recorded in the audit log: {exc}")
        finally:
            self.log.close()
            self.log = None


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return "uid-unknown"


def _principal(p: Principal) -> str:
    groups = f" (groups {','.join(p.groups)})" if p.groups else ""
    return f"for {p.user}{groups}{', admin' if p.admin else ''}"


def _ttl_option(default: str | None, help: str) -> Callable[[F], F]:
    return click.option("--ttl", default=default, show_default=default is not None, help=help)


def _duration(text: str, option: str = "--ttl") -> float | None:
    try:
        return parse_ttl(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _id(text: str) -> str:
    if len(text) > _MAX_ID or not text.isprintable():
        raise click.BadParameter(
            "not a token id (`appliance token list` shows them)", param_hint="ID"
        )
    return text


def _entries(path: Path) -> list[TokenEntry]:
    if not path.exists():
        return []
    try:
        return read_entries(path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def token() -> None:
    """Manage bearer tokens (authentication is on once a tokens file is configured)."""


@token.command("create")
@click.option("--user", required=True, help="The user the token acts as.")
@click.option("--group", "groups", multiple=True, help="A group of the user (repeatable).")
@click.option("--admin", is_flag=True, help="May act on every job and use P0.")
@_ttl_option(DEFAULT_TTL, "How long it works: 30m, 12h, 90d; 0 or never for no expiry.")
@_file_option
@_audit_options
def token_create(
    user: str,
    groups: tuple[str, ...],
    admin: bool,
    ttl: str,
    path: Path,
    data_dir: Path | None,
    no_audit: bool,
) -> None:
    """Create a token, store only its hash, and print the token once (its id, expiry and
    the next steps go to stderr).

    \b
    Example:
      appliance token create --user alice --group nlp --ttl 30d --file /etc/appliance/tokens.yaml
      APPLIANCE_AUTH_TOKENS_FILE=/etc/appliance/tokens.yaml appliance serve
    """
    try:
        validate_user(user)
    except ApplianceError as exc:
        raise click.BadParameter(exc.message, param_hint="--user") from None
    for group in groups:
        try:
            validate_user(group)
        except ApplianceError:
            rule = "1-253 characters of letters, digits, '-', '_', '.' or '@'"
            raise click.BadParameter(f"{group[:40]!r}: {rule}", param_hint="--group") from None
    seconds = _duration(ttl)
    _entries(path)  # a file that cannot be read is said so, not overwritten
    audit = _Audit(data_dir, no_audit)
    made, entry = add_token(path, Principal(user, groups, admin), seconds)
    audit.record("token-create", entry.id, f"{_principal(entry.principal)}; "
                 f"{_expiry(entry, time.time())}")  # fmt: skip
    click.echo(made)
    click.echo(f"token {entry.id} for {user}: {_expiry(entry, time.time())}", err=True)


@token.command("list")
@_file_option
def token_list(path: Path) -> None:
    """The tokens of the file: id, user, groups, admin, created, expires (never a secret)."""
    now = time.time()
    rows = [("ID", "USER", "GROUPS", "ADMIN", "CREATED", "EXPIRES", "STATE")]
    for e in _entries(path):
        p = e.principal
        rows.append((
            e.id, p.user, ",".join(p.groups) or "-", "yes" if p.admin else "no",
            "-" if e.created is None else iso(e.created),
            "never" if e.expires is None else iso(e.expires),
            "expired" if e.expired(now) else "valid",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@token.command("revoke")
@click.argument("token_id", metavar="ID")
@_file_option
@_audit_options
def token_revoke(token_id: str, path: Path, data_dir: Path | None, no_audit: bool) -> None:
    """Remove the token ID: the coordinator refuses it within about a second."""
    _entries(path)
    token_id = _id(token_id)
    audit = _Audit(data_dir, no_audit)
    try:
        gone = revoke_token(path, token_id)
    except LookupError as exc:
        audit.record("token-revoke", token_id, "", refused=str(exc))
        raise click.ClickException(str(exc)) from None
    audit.record("token-revoke", gone.id, _principal(gone.principal))
    click.echo(f"token {gone.id} of {gone.principal.user} revoked")


@token.command("rotate")
@click.argument("token_id", metavar="ID")
@_ttl_option(None, "How long the new token works [default: as long as the old one did].")
@click.option(
    "--overlap",
    default="0",
    show_default=True,
    help="Keep the old token this long (30m, 1h) so its users can switch; 0 revokes it now.",
)
@_file_option
@_audit_options
def token_rotate(
    token_id: str,
    ttl: str | None,
    overlap: str,
    path: Path,
    data_dir: Path | None,
    no_audit: bool,
) -> None:
    """Make a new token for the principal of token ID and print it once; the old one is
    revoked now, or expires after --overlap.

    \b
    Example:
      appliance token rotate 3fa2b1c9 --overlap 1h --file /etc/appliance/tokens.yaml
    """
    entries, token_id = _entries(path), _id(token_id)
    audit = _Audit(data_dir, no_audit)
    try:
        old = find_entry(path, entries, token_id)
    except LookupError as exc:
        audit.record("token-rotate", token_id, "", refused=str(exc))
        raise click.ClickException(str(exc)) from None
    if ttl is not None:
        seconds = _duration(ttl)
    elif old.expires is None or old.created is None:
        seconds = None if old.expires is None else _duration(DEFAULT_TTL)
    else:
        seconds = old.expires - old.created
    kept = _duration(overlap, "--overlap") or 0.0
    made, entry = rotate_token(path, old.id, seconds, kept)
    then = "now" if not kept else f"at {iso(min(time.time() + kept, old.expires or 1e18))}"
    what = f"{entry.id}, which {_expiry(entry, time.time())}; {old.id} ends {then}"
    audit.record("token-rotate", old.id, f"{_principal(old.principal)}; replaced by {what}")
    click.echo(made)
    click.echo(f"token {entry.id} replaces {old.id} (which ends {then}): "
               f"{_expiry(entry, time.time())}", err=True)  # fmt: skip


def _expiry(entry: TokenEntry, now: float) -> str:
    return "never expires" if entry.expires is None else f"expires at {iso(entry.expires)}"
