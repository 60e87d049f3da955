"""A Qdrant server for tests: qdrant-client's local mode, served over Qdrant's REST API.

Qdrant's server binary cannot run on these machines; qdrant-client's local mode (pure Python,
in-process) is the accepted stand-in for it. Local mode lives in one process, though, and some
tests need several processes (the indexer's workers, the query API) to share one store. This
serves one `QdrantClient(":memory:")` over HTTP with the part of the REST API that our code uses,
in the real server's shapes (qdrant-client's REST models), so `QdrantClient(url=...,
check_compatibility=False)` in any process works against it. Local mode keeps no payload
indexes, shards or HNSW settings: requests for those are accepted and ignored.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python
from qdrant_client import QdrantClient
from qdrant_client.http import models as m
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.processes import free_ports
from tests.support.waiting import wait_until

VERSION = "1.15.5"
# How local mode says what the server answers with a 404.
_MISSING = re.compile(r"Collection (.+) not found")

# A call on the local client: the client, the collection named in the path (or ""), the body.
Call = Callable[[QdrantClient, str, Any], Any]

_DONE = m.UpdateResult(operation_id=0, status=m.UpdateStatus.COMPLETED)


def _answer(result: Any) -> JSONResponse:
    # The models' JSON by alias, as the server writes it ("except", not "except_").
    return JSONResponse({"result": to_jsonable_python(result), "status": "ok", "time": 0.0})


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"status": {"error": message}, "time": 0.0}, status_code=status)


def _selector(body: m.SetPayload) -> m.PointsSelector:
    if body.points is not None:
        return m.PointIdsList(points=body.points)
    return m.FilterSelector(filter=body.filter or m.Filter())


def _upsert(c: QdrantClient, name: str, body: m.PointInsertOperations) -> m.UpdateResult:
    points = body.batch if isinstance(body, m.PointsBatch) else body.points
    return c.upsert(name, points)


def _create_index(c: QdrantClient, name: str, body: m.CreateFieldIndex) -> m.UpdateResult:
    c.get_collection(name)  # a missing collection answers 404, as on the server
    return _DONE  # local mode filters without indexes: nothing to build


def _scroll(c: QdrantClient, name: str, body: m.ScrollRequest) -> m.ScrollResult:
    points, offset = c.scroll(
        name,
        scroll_filter=body.filter,
        limit=body.limit or 10,
        order_by=body.order_by,
        offset=body.offset,
        with_payload=True if body.with_payload is None else body.with_payload,
        with_vectors=body.with_vector or False,
    )
    return m.ScrollResult(points=points, next_page_offset=offset)


def _query(c: QdrantClient, name: str, body: m.QueryRequest) -> m.QueryResponse:
    # No search params: local mode searches exactly, ignores them and warns (an error in tests).
    return c.query_points(
        name,
        query=body.query,
        using=body.using,
        prefetch=body.prefetch,
        query_filter=body.filter,
        limit=body.limit or 10,
        offset=body.offset,
        with_payload=body.with_payload or False,
        with_vectors=body.with_vector or False,
        score_threshold=body.score_threshold,
        lookup_from=body.lookup_from,
    )


def _query_batch(c: QdrantClient, name: str, body: m.QueryRequestBatch) -> list[m.QueryResponse]:
    # One at a time through _query, which leaves out the search params local mode warns about.
    return [_query(c, name, request) for request in body.searches]


def _update(c: QdrantClient, name: str, body: m.UpdateCollection) -> bool:
    c.update_collection(
        name,
        vectors_config=body.vectors,
        sparse_vectors_config=body.sparse_vectors,
    )
    return True  # the server answers true whether or not anything changed


# (method, path, the body's model or None, the call): the REST API of qdrant_client/http/api.
API: list[tuple[str, str, Any, Call]] = [
    ("GET", "/collections", None, lambda c, _, __: c.get_collections()),
    ("GET", "/aliases", None, lambda c, _, __: c.get_aliases()),
    (
        "POST",
        "/collections/aliases",
        m.ChangeAliasesOperation,
        lambda c, _, b: c.update_collection_aliases(change_aliases_operations=b.actions),
    ),
    ("GET", "/collections/{name}", None, lambda c, n, _: c.get_collection(n)),
    (
        "GET",
        "/collections/{name}/exists",
        None,
        lambda c, n, _: m.CollectionExistence(exists=c.collection_exists(n)),
    ),
    (
        "PUT",
        "/collections/{name}",
        m.CreateCollection,
        lambda c, n, b: c.create_collection(
            n, vectors_config=b.vectors, sparse_vectors_config=b.sparse_vectors
        ),
    ),
    ("PATCH", "/collections/{name}", m.UpdateCollection, _update),
    ("DELETE", "/collections/{name}", None, lambda c, n, _: c.delete_collection(n)),
    ("PUT", "/collections/{name}/index", m.CreateFieldIndex, _create_index),
    ("GET", "/collections/{name}/aliases", None, lambda c, n, _: c.get_collection_aliases(n)),
    ("PUT", "/collections/{name}/points", m.PointInsertOperations, _upsert),
    (
        "POST",
        "/collections/{name}/points",
        m.PointRequest,
        lambda c, n, b: c.retrieve(
            n,
            b.ids,
            with_payload=True if b.with_payload is None else b.with_payload,
            with_vectors=b.with_vector or False,
        ),
    ),
    ("POST", "/collections/{name}/points/scroll", m.ScrollRequest, _scroll),
    ("POST", "/collections/{name}/points/query", m.QueryRequest, _query),
    ("POST", "/collections/{name}/points/query/batch", m.QueryRequestBatch, _query_batch),
    (
        "POST",
        "/collections/{name}/points/count",
        m.CountRequest,
        lambda c, n, b: c.count(n, count_filter=b.filter, exact=b.exact is not False),
    ),
    (
        "POST",
        "/collections/{name}/facet",
        m.FacetRequest,
        lambda c, n, b: c.facet(
            n, b.key, facet_filter=b.filter, limit=b.limit or 10, exact=b.exact or False
        ),
    ),
    (
        "POST",
        "/collections/{name}/points/delete",
        m.PointsSelector,
        lambda c, n, b: c.delete(n, points_selector=b),
    ),
    (
        "POST",
        "/collections/{name}/points/payload",
        m.SetPayload,
        lambda c, n, b: c.set_payload(n, b.payload, _selector(b), key=b.key),
    ),
    (
        "PUT",
        "/collections/{name}/points/payload",
        m.SetPayload,
        lambda c, n, b: c.overwrite_payload(n, b.payload, _selector(b)),
    ),
    (
        "POST",
        "/collections/{name}/points/batch",
        m.UpdateOperations,
        lambda c, n, b: c.batch_update_points(n, b.operations),
    ),
]


def app(client: QdrantClient, requests: list[tuple[str, str, Any]] | None = None) -> Starlette:
    """The REST API over one local-mode client, which answers one request at a time. Each
    request (method, path, parsed body) is appended to `requests` when given: what the server
    was asked to do, for tests of what local mode would ignore (HNSW settings, say)."""
    # Local mode is plain Python dicts, not thread-safe: one call at a time. The handlers all run
    # on the event loop's thread already; the lock keeps it so if they ever move to a thread pool.
    lock = threading.Lock()

    def endpoint(body_type: Any, call: Call) -> Callable[[Request], Awaitable[Response]]:
        parser = None if body_type is None else TypeAdapter(body_type)

        async def handle(request: Request) -> Response:
            name = str(request.path_params.get("name", ""))
            try:
                body = None if parser is None else parser.validate_json(await request.body())
                if requests is not None:
                    requests.append((request.method, request.url.path, body))
                with lock:
                    return _answer(call(client, name, body))
            except ValueError as e:  # pydantic's ValidationError is one too: a bad body
                missing = _MISSING.fullmatch(str(e))
                if missing:
                    return _error(f"Not found: Collection `{missing[1]}` doesn't exist!", 404)
                return _error(f"Wrong input: {e}", 400)

        return handle

    async def version(request: Request) -> Response:
        return JSONResponse({"title": "qdrant - vector search engine", "version": VERSION})

    routes = [Route("/", version, methods=["GET"])]
    routes += [Route(path, endpoint(body, call), methods=[verb]) for verb, path, body, call in API]
    return Starlette(routes=routes)


@contextmanager
def qdrant_stand_in(requests: list[tuple[str, str, Any]] | None = None) -> Iterator[str]:
    """A fresh, empty stand-in served on a free port of 127.0.0.1: yields its URL. Requests
    go into `requests` when given (see app)."""
    [port] = free_ports(1)
    client = QdrantClient(location=":memory:")
    # ws="none": no websockets import (its deprecation warnings are errors in tests). A client
    # that hangs on to a request must not hold up the end of the test for ever.
    config = uvicorn.Config(
        app(client, requests),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    # A thread of the test process: other processes reach it over HTTP all the same.
    thread = threading.Thread(target=server.run, name=f"qdrant-stand-in-{port}", daemon=True)
    thread.start()
    try:

        def started() -> bool:
            if not thread.is_alive():
                raise RuntimeError(f"the Qdrant stand-in did not start on port {port}")
            return server.started

        wait_until(started, 60, f"the Qdrant stand-in started on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        client.close()


def clear(url: str) -> None:
    """Delete every collection of the server at url (and so every alias): an empty store."""
    client = QdrantClient(url=url, check_compatibility=False)
    try:
        for collection in client.get_collections().collections:
            client.delete_collection(collection.name)
    finally:
        client.close()
