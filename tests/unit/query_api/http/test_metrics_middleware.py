"""The API's in-flight gauge, which the autoscaler reads: requests counted while they run."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from query_api.http.metrics import Metrics, MetricsMiddleware
from tests.support.waiting import await_until


def in_flight(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("photosearch_http_requests_in_flight")
    assert value is not None
    return value


async def test_requests_are_in_flight_until_answered_and_probes_never_are() -> None:
    metrics = Metrics()
    release = asyncio.Event()
    entered: list[str] = []

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        entered.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = MetricsMiddleware(slow_app, metrics)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    def call(path: str) -> asyncio.Task[None]:
        scope: Scope = {"type": "http", "method": "GET", "path": path, "headers": []}
        return asyncio.create_task(app(scope, receive, send))

    searches = [call("/v1/search") for _ in range(3)]
    probes = [call(p) for p in ("/readyz", "/healthz", "/metrics")]

    async def all_running() -> bool:
        return len(entered) == 6

    await await_until(all_running, 30, lambda: f"six requests running: {entered}")
    assert in_flight(metrics) == 3
    release.set()
    await asyncio.gather(*searches, *probes)
    assert in_flight(metrics) == 0
    assert len([m for m in sent if m["type"] == "http.response.start"]) == 6


async def test_a_request_that_raises_leaves_the_gauge_where_it_was() -> None:
    metrics = Metrics()

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    scope: Scope = {"type": "http", "method": "GET", "path": "/v1/search", "headers": []}
    with pytest.raises(RuntimeError, match="boom"):
        await MetricsMiddleware(failing, metrics)(scope, receive, send)
    assert in_flight(metrics) == 0
