"""Liveness and readiness (which dependency failed); /metrics has a listener of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from core.vectorstore import model_version_of
from query_api.deps import ServicesDep
from query_api.http.errors import Unavailable

router = APIRouter(tags=["health"])

_CHECK_TIMEOUT_S = 2.0
_READY = {
    "status": "degraded",
    "checks": {
        "vector_store": {"ok": True, "collection": "photos-m2-3f9c2a1b7d4e"},
        "triton": {"ok": True, "model_version": 2},
        "redis": {"ok": False, "error": "Redis unreachable: the query cache is bypassed"},
    },
}
_NOT_READY = {
    "status": "not ready",
    "checks": {
        "vector_store": {"ok": True, "collection": "photos-m2-3f9c2a1b7d4e"},
        "triton": {"ok": False, "error": "model version 2 is not ready in Triton"},
        "redis": {"ok": True},
    },
}


def _json(description: str, example: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"example": example}}}


@router.get(
    "/healthz",
    responses={
        200: _json("The process answers.", {"status": "ok"}),
        503: _json(
            "What runs beside it has stopped.",
            {"status": "failing", "error": "the embedded indexing worker has stopped"},
        ),
    },
)
async def healthz(request: Request) -> JSONResponse:
    """The process answers (liveness), and what runs beside it (an embedded worker) still runs.

    A worker thread that died leaves searches working and indexing silently stopped: failing
    liveness gets the process restarted, worker and all.
    """
    for companion in getattr(request.app.state, "companions", []):
        if not companion.alive():
            return JSONResponse(
                {"status": "failing", "error": f"{companion.name} has stopped"}, 503
            )
    return JSONResponse({"status": "ok"})


@router.get(
    "/readyz",
    responses={
        200: _json("Ready; degraded when only Redis does not answer.", _READY),
        503: _json("The vector store or Triton does not answer.", _NOT_READY),
    },
)
async def readyz(services: ServicesDep) -> JSONResponse:
    """Ready when the live collection and its model version in Triton answer.

    Redis is reported but does not make the replica unready: searches go on without the
    cache, and pulling every replica out of the load balancer would turn a slower service
    into no service.
    """
    checks: dict[str, Any] = {}
    version: int | None = None
    try:
        # Asked of the store, never the name searches reuse for a second: the probe reports
        # what is live now (and refreshes that name for the searches after it).
        collection = await services.live_collection(fresh=True)
        version = model_version_of(collection)
        checks["vector_store"] = {"ok": True, "collection": collection}
    except Unavailable as exc:
        checks["vector_store"] = {"ok": False, "error": exc.message}

    async def triton() -> dict[str, Any]:
        if version is None:
            return {"ok": False, "error": "no model version to check: no live collection"}
        try:
            ready = await asyncio.wait_for(services.embedder.is_ready(version), _CHECK_TIMEOUT_S)
        except TimeoutError:
            return {"ok": False, "error": f"Triton did not answer within {_CHECK_TIMEOUT_S} s"}
        if not ready:
            return {"ok": False, "error": f"model version {version} is not ready in Triton"}
        return {"ok": True, "model_version": version}

    async def redis() -> dict[str, Any]:
        if await services.cache.ping():
            return {"ok": True}
        return {"ok": False, "error": "Redis unreachable: the query cache is bypassed"}

    checks["triton"], checks["redis"] = await asyncio.gather(triton(), redis())
    for name, check in checks.items():
        services.metrics.dependency_ready.labels(name).set(1 if check["ok"] else 0)
    ready = checks["vector_store"]["ok"] and checks["triton"]["ok"]
    status = "ready" if ready and checks["redis"]["ok"] else "degraded" if ready else "not ready"
    return JSONResponse({"status": status, "checks": checks}, status_code=200 if ready else 503)
