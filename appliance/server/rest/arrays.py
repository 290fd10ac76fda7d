"""/api/v1/arrays/{id}: an array's tasks (services/arrays.py), as `csctl get array` shows them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from appliance.domain.array_view import array_document, sorted_tasks
from appliance.domain.auth import Principal
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import ArrayOut
from appliance.services.arrays import ArrayService

ArrayId = Annotated[str, Path(description="The array's id, wsjob-<id>.", max_length=64)]


def arrays_router(arrays: ArrayService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)

    @router.get("/arrays/{array_id}", response_model=ArrayOut)
    async def get_array(
        array_id: ArrayId,
        sort: Annotated[
            str,
            Query(
                description="index, or best first: loss, eval (eval loss), accuracy.",
                max_length=16,
            ),
        ] = "index",
        by: Principal | None = authenticated,
    ) -> ArrayOut:
        """An array's tasks, one row each: index, sweep overrides, phase, reason, the last
        step with its loss, and its last evaluation (the view at the end of a sweep)."""
        view = await arrays.view(array_id, by=by)
        rows = sorted_tasks(view.tasks, sort)
        return ArrayOut.model_validate(array_document(view, rows))

    return router
