"""The FastAPI application: clients opened in the lifespan, routes, errors, metrics, the page."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from photosearch.settings import Settings, get_settings
from photosearch.vectorstore import VectorStore
from query_api.errors import ApiError, error_body, install_handlers
from query_api.metrics import Metrics, MetricsMiddleware
from query_api.routes import admin, health, model, photos, search
from query_api.services import Services

STATIC = Path(__file__).parent / "static"
# Multipart framing around an upload: boundaries and part headers.
_MULTIPART_SLACK = 64 * 1024


class _Static(StaticFiles):
    """The page's scripts and styles: revalidated on each load, so a deploy is seen at once."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


class BodyLimit:
    """Refuse a request body above the upload limit before it is read into memory."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise ApiError(413, f"the request body is larger than {self.max_bytes} bytes")
            return message

        await self.app(scope, counted, send)

    async def _too_large(self, send: Send) -> None:
        body = json.dumps(
            error_body("too_large", f"the request body is larger than {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_app(
    settings: Settings | None = None,
    *,
    store: VectorStore | None = None,
    embedded_worker: bool = False,
) -> FastAPI:
    """The API; `store` lets a process that already owns the embedded store share it.

    `embedded_worker` runs a Celery worker on this process's threads, over this process's
    store: Qdrant Edge admits one owner, so in `photosearch up`'s embedded mode the API process
    indexes too, still fed by the real Redis queue.
    """
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from indexer.app import app as celery_app
        from indexer.app import configure

        # The admin routes send tasks through the same broker the workers consume.
        configure(celery_app, settings)
        services = Services.open(settings, store, metrics)
        app.state.services = services
        try:
            # The worker stops (finishing its tasks) before the store it writes is closed.
            with ExitStack() as worker:
                app.state.embedded_worker = None
                if embedded_worker:
                    from indexer.host import embedded_worker as start_worker

                    app.state.embedded_worker = worker.enter_context(
                        start_worker(celery_app, settings, services.store)
                    )
                yield
        finally:
            await services.close()

    app = FastAPI(
        title="PhotoSearch",
        version="1",
        summary="Search PhotoStock's photos by text, by image, or for more like one.",
        lifespan=lifespan,
    )
    install_handlers(app, settings.api.retry_after_s)
    for router in (search.router, model.router, photos.router, admin.router, health.router):
        app.include_router(router)
    app.add_middleware(BodyLimit, max_bytes=settings.api.max_upload_bytes + _MULTIPART_SLACK)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.mount("/static", _Static(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    return app
