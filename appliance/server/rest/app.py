"""The FastAPI application: /healthz (process up) and /readyz (store reachable)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

import appliance
from appliance.services.context import Context


def create_app(ctx: Context) -> FastAPI:
    app = FastAPI(title="appliance", version=appliance.__version__)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        try:
            await ctx.db(ctx.store.phase_of, "wsjob-readinessprobe")
        except Exception as exc:  # the store is down: not ready, and say why
            return JSONResponse({"status": "unavailable", "reason": str(exc)[:200]}, 503)
        return JSONResponse({"status": "ok"})

    return app
