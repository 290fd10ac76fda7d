"""The one mapping from the domain error taxonomy to HTTP, and the one error body shape.

Every error the REST API returns looks like `{"error": {"code", "message", "field"}}`: domain
errors (by the table below), FastAPI's request validation (422, naming the field), Starlette's
own HTTP errors (unknown route, wrong method) and anything unexpected (500, generic message;
the traceback goes to the coordinator's log, never to the caller).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from appliance.domain import errors
from appliance.domain.limits import retry_after_seconds
from appliance.server.rest.models import ErrorDetail, ErrorOut

log = logging.getLogger(__name__)

# Most specific first: InsufficientCapacity is an InvalidSpec.
TO_STATUS: tuple[tuple[type[errors.ApplianceError], int, str], ...] = (
    # 422: the request is well-formed JSON of the right shape, but what it asks is not valid.
    (errors.InsufficientCapacity, 422, "insufficient_capacity"),
    (errors.InvalidSpec, 422, "invalid_spec"),
    (errors.NotFound, 404, "not_found"),
    (errors.PermissionDenied, 403, "permission_denied"),
    (errors.Unauthenticated, 401, "unauthenticated"),
    (errors.Conflict, 409, "conflict"),
    (errors.Unavailable, 503, "unavailable"),
    (errors.DeadlineExceeded, 504, "deadline_exceeded"),
    (errors.LimitExceeded, 429, "too_many_requests"),
)
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})

# Every route documents these; success bodies are documented by the routes themselves.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "The body is not JSON at all."},
    401: {"model": ErrorOut, "description": "Authentication is on and the token is missing."},
    403: {"model": ErrorOut, "description": "The caller may not act on this job."},
    404: {"model": ErrorOut, "description": "No such job."},
    422: {
        "model": ErrorOut,
        "description": "The request does not match the schema, or a value is invalid (names "
        "the field).",
    },
    500: {"model": ErrorOut, "description": "Internal error (details in the server log)."},
    429: {
        "model": ErrorOut,
        "description": "The caller is over a per-user limit (request rate, streams, queued "
        "jobs; the message names it); retry after the Retry-After header's seconds.",
    },
    503: {"model": ErrorOut, "description": "The store cannot be reached; retry later."},
}


def status_for(exc: errors.ApplianceError) -> tuple[int, str]:
    for cls, status, code in TO_STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal"


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ErrorOut(error=ErrorDetail(code=code, message=message, field=field))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


CLOSE = {"Connection": "close"}


async def _appliance_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.ApplianceError)
    status, code = status_for(exc)
    if status >= 500:
        log.error("request failed: %s", exc.message)
    headers = None
    if isinstance(exc, errors.LimitExceeded):
        headers = {"Retry-After": str(retry_after_seconds(exc.retry_after))}
    return error_response(status, code, exc.message, exc.field, headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = list(exc.errors())
    if not problems:
        return error_response(422, "invalid_request", "the request is not valid")
    first = problems[0]
    if first.get("type") == "json_invalid":  # its location is a character offset, not a field
        detail = first.get("ctx", {}).get("error", "")
        text = f"the request body is not valid JSON ({detail})" if detail else "not valid JSON"
        return error_response(422, "invalid_request", text, "body")
    loc = _field_path(first.get("loc", ()))
    where = loc[1:] if len(loc) > 1 and loc[0] in _LOCATIONS else loc
    # A key like "" still has a place: name the body (or query) it is in rather than nothing.
    field = ".".join(where) if any(where) else (loc[0] if loc else None)
    message = str(first.get("msg", "invalid value"))
    # A value that fits none of a union's members is one problem of one field, not several.
    others = {tuple(_field_path(p.get("loc", ()))) for p in problems} - {tuple(loc)}
    more = f" (and {len(others)} more problem(s))" if others else ""
    text = f"{field}: {message}{more}" if field else f"{message}{more}"
    return error_response(422, "invalid_request", text, field)


_UNION_MEMBERS = frozenset({"int", "float", "str", "bool", "bytes", "none", "list", "dict"})
_UNION_MEMBER_KINDS = (
    "constrained-", "function-", "lax-or-strict", "json-or-python", "is-instance", "literal[",
    "nullable[", "union[", "tagged-union[", "list[", "dict[",
)  # fmt: skip


def _field_path(loc: Sequence[object]) -> list[str]:
    """A problem's place without the union member pydantic tried (`max_systems_per_user.int`
    is the field `max_systems_per_user`): a member's tag is a type name or one of pydantic's
    kinds (`constrained-str`, `literal['unlimited']`, `list[constrained-str]`); a label key is
    kept as it is."""
    return [
        str(part)
        for part in loc
        if not (
            isinstance(part, str)
            and (part in _UNION_MEMBERS or part.startswith(_UNION_MEMBER_KINDS))
        )
    ]


def status_error(
    status: int,
    message: str = "",
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An error named after its HTTP status (404 -> not_found), for errors of HTTP itself."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "HTTP error"
    code = phrase.lower().replace(" ", "_").replace("-", "_")
    return error_response(status, code, message or phrase, field, headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else ""
    if exc.status_code == 400:  # FastAPI's own: a body it could not parse at all
        message = f"{message or 'Bad Request'}: send a JSON object with content-type "
        message += "application/json"
        return status_error(400, message, "body", headers=exc.headers)
    field = "body" if exc.status_code == 413 else None
    return status_error(exc.status_code, message, field, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error serving %s %s", request.method, request.url.path, exc_info=exc)
    # Starlette raises the error again once this response is sent, and uvicorn then closes
    # the connection: say so, or a keep-alive client sends its next request into a reset.
    return error_response(
        500, "internal", "internal error; see the coordinator's log", headers=CLOSE
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the one body shape (called once, by create_app)."""
    app.add_exception_handler(errors.ApplianceError, _appliance_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
