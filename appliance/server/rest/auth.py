"""The caller of a REST request, from `Authorization: Bearer <token>` (same tokens as gRPC)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated

from fastapi import Header

from appliance.domain.auth import Principal
from appliance.server.auth import Authenticator

CallerDependency = Callable[[str | None], Coroutine[None, None, Principal | None]]


def caller_dependency(auth: Authenticator) -> CallerDependency:
    """A FastAPI dependency: the authenticated caller, or None when authentication is off.

    A coroutine on purpose: FastAPI runs a plain function dependency on its thread pool, a
    thread hop (and a GIL hand-off) per request for a dictionary lookup.
    """

    async def caller(
        authorization: Annotated[
            str | None, Header(description="Bearer <token>, when tokens are configured.")
        ] = None,
    ) -> Principal | None:
        return auth.caller(authorization)

    return caller
