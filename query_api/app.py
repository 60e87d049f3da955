"""The FastAPI application: clients opened in the lifespan, routes, errors, metrics, the page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    ExitStack,
    asynccontextmanager,
    contextmanager,
)
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import start_http_server
from starlette.responses import Response

from core.settings import Settings, get_settings
from core.vectorstore import VectorStore
from query_api.http.clientaddress import ClientAddress
from query_api.http.errors import install_handlers
from query_api.http.guards import BodyLimit, SecurityHeaders
from query_api.http.metrics import Metrics, MetricsMiddleware
from query_api.http.shedding import Shedding
from query_api.routes import admin, events, experiments, health, model, photos, search, suggest
from query_api.services import Services
from query_api.suggest.suggestions import suggestions_of


class Companion(Protocol):
    """Work that runs in the API's process over its services, for the app's lifetime (`up`'s
    embedded mode runs the indexing worker this way); liveness fails when it has stopped."""

    name: str

    def alive(self) -> bool: ...


# Started in the lifespan once the services are open; stopped before they close.
StartCompanion = Callable[[Services], AbstractContextManager[Companion]]

STATIC = Path(__file__).parent / "static"
# Multipart framing around an upload: boundaries and part headers.
_MULTIPART_SLACK = 64 * 1024
UPLOAD_ROUTES = ("/v1/search/image",)
# Swagger UI from the app's own files: no third-party script on the origin that keeps the key.
# Its configuration is a file of ours too: the CSP (default-src 'self') refuses inline scripts.
_DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>PhotoSearch API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script></body></html>
"""
# The two files of the Swagger UI package the page loads; the rest (its demo index.html,
# which names the petstore on another host, its source maps) stays unserved.
_DOCS_FILES = ("swagger-ui.css", "swagger-ui-bundle.js")


class _Static(StaticFiles):
    """The page's scripts and styles: revalidated on each load, so a deploy is seen at once."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


def create_app(
    settings: Settings | None = None,
    *,
    store: VectorStore | None = None,
    companions: Sequence[StartCompanion] = (),
) -> FastAPI:
    """The API; `store` lets a process that already owns the embedded store share it.

    `companions` run beside the API over its services: in `photosearch up`'s embedded mode,
    the indexing worker (Qdrant Edge admits one owner, so that process indexes too, still fed
    by the real Redis queue).
    """
    settings = settings or get_settings()
    metrics = Metrics()
    api = settings.api
    app = FastAPI(
        title="PhotoSearch",
        version="1",
        summary="Search PhotoStock's photos by text, by image, or for more like one.",
        lifespan=services_lifespan(settings, store, metrics, companions),
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if api.docs else None,
    )
    install_handlers(app, api.retry_after_s, api.overload_retry_after_s)
    routers = (search.router, model.router, photos.router, events.router, admin.router)
    for router in (*routers, suggest.router, experiments.router, health.router):
        app.include_router(router)
    upload = api.max_upload_bytes + _MULTIPART_SLACK
    app.add_middleware(
        BodyLimit,
        default_bytes=api.max_json_bytes,
        limits=dict.fromkeys(UPLOAD_ROUTES, upload),
        timeout_s=api.body_timeout_s,
    )
    # Inside the metrics and headers, outside all else: a shed search is counted, costs
    # nothing more (query_api/http/shedding.py).
    app.add_middleware(
        Shedding,
        limit=api.max_searches_in_flight,
        retry_after_s=api.overload_retry_after_s,
        on_shed=lambda: metrics.refused.labels("shed").inc(),
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(SecurityHeaders)
    # Outermost: everything after it, the access log too, sees the client's address.
    app.add_middleware(ClientAddress, proxies=api.trusted_proxies, header=api.client_address_header)
    app.mount("/static", _Static(directory=STATIC), name="static")
    if api.docs:
        _serve_docs(app)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    # Asked for by browsers, feed readers and tools that never read the page's <link rel=icon>.
    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(STATIC / "favicon.ico", headers={"Cache-Control": "max-age=86400"})

    return app


def services_lifespan(
    settings: Settings,
    store: VectorStore | None,
    metrics: Metrics,
    companions: Sequence[StartCompanion] = (),
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: its Services opened on `app.state.services`, the metrics listener
    and the companions started; all stopped on exit. An app of only some routers (a unit
    test's) takes the same."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = Services.open(settings, store, metrics)
        app.state.services = services
        # Suggestions' index, refreshed in the background until the services close.
        app.state.suggestions = suggestions = suggestions_of(services).start()
        try:
            # Companions stop (a worker finishing its tasks) before the store they use closes.
            with ExitStack() as running:
                running.enter_context(metrics_listener(settings, metrics))
                app.state.companions = [
                    running.enter_context(start(services)) for start in companions
                ]
                yield
        finally:
            await suggestions.stop()
            await services.close()

    return lifespan


@contextmanager
def metrics_listener(settings: Settings, metrics: Metrics) -> Iterator[None]:
    """/metrics on a listener of its own (an internal port): key names, per-key counts and
    collection names are for the operator's Prometheus, never for the public port."""
    api = settings.api
    if not api.metrics_port:
        yield
        return
    server, thread = start_http_server(api.metrics_port, api.metrics_host, metrics.registry)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _serve_docs(app: FastAPI) -> None:
    # Swagger UI 5 (the `swagger-ui-bundle-v2` package): it renders OpenAPI 3.1, FastAPI's.
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

    files = {name: Path(swagger_ui_path) / name for name in _DOCS_FILES}

    @app.get("/docs/static/{name}", include_in_schema=False)
    async def docs_file(name: str) -> FileResponse:
        if name not in files:
            raise HTTPException(404, "Not Found")
        return FileResponse(files[name], headers={"Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(_DOCS_PAGE)
