"""Prometheus metrics of the API, and the ASGI middleware that times every request by route."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from query_api.http.timing import Stages, server_timing

# Latency buckets from 1 ms: the cached path answers in a few ms, the budget is 100 ms.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """One registry per app, so several apps (tests) can live in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "photosearch_http_request_duration_seconds",
            "HTTP request latency by route template, method and status.",
            ["route", "method", "status"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "photosearch_http_errors_total",
            "Answers with status >= 400, by route and error code.",
            ["route", "status"],
            registry=r,
        )
        self.cache = Counter(
            "photosearch_query_cache_total",
            "Query-embedding cache lookups: hit, miss, or bypass (Redis unavailable).",
            ["result"],
            registry=r,
        )
        self.cache_errors = Counter(
            "photosearch_query_cache_errors_total",
            "Redis calls that failed or missed their deadline.",
            ["operation"],
            registry=r,
        )
        self.triton_seconds = Histogram(
            "photosearch_triton_request_duration_seconds",
            "Embedding calls to Triton (tokenizing or decoding included), by model.",
            ["model"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.triton_errors = Counter(
            "photosearch_triton_errors_total",
            "Embedding calls that failed, by model and kind.",
            ["model", "kind"],
            registry=r,
        )
        self.refused = Counter(
            "photosearch_overload_refused_total",
            "Searches refused with 503 by admission control (the replica's embeddings in "
            "flight at their bound, or Triton's queue full), by kind.",
            ["kind"],
            registry=r,
        )
        # Server-Timing's stages as histograms: where a search's time goes, by route.
        self.stage_seconds = Histogram(
            "photosearch_request_stage_seconds",
            "Time per stage of a request (resolve, cache, admit, tokenize, embed, search, "
            "other, total), by route template.",
            ["route", "stage"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.image_url_fetches = Counter(
            "photosearch_image_url_fetches_total",
            "Images fetched for searches by URL, by outcome: fetched, invalid_url, "
            "refused_address, too_many_redirects, upstream_status, not_image, too_large, "
            "upstream_error, timeout, caller_busy (the caller's fetches in flight at the bound).",
            ["outcome"],
            registry=r,
        )
        self.search_seconds = Histogram(
            "photosearch_vector_search_duration_seconds",
            "Vector-store searches, by kind of query.",
            ["kind"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.store_errors = Counter(
            "photosearch_vector_store_errors_total",
            "Vector-store calls that failed or missed their deadline.",
            ["operation"],
            registry=r,
        )
        # Per pod, what the autoscaler scales on (through the Prometheus adapter): unlike CPU,
        # it rises as soon as Triton or the store slows down and requests pile up.
        self.in_flight = Gauge(
            "photosearch_http_requests_in_flight",
            "HTTP requests being answered now (probes and /metrics excluded).",
            registry=r,
        )
        self.dependency_ready = Gauge(
            "photosearch_dependency_ready",
            "1 when the dependency answered the last /readyz check, else 0.",
            ["dependency"],
            registry=r,
        )
        self.requests_by_key = Counter(
            "photosearch_requests_by_key_total",
            "Requests per API key name ('anonymous' without a key, 'invalid' when refused).",
            ["key"],
            registry=r,
        )
        # Anonymous callers are one label, never one per address: a scanner would make a
        # series of each address it sent from.
        self.rate_limited = Counter(
            "photosearch_rate_limited_total",
            "Searches refused with 429 past the caller's rate limit, by API key name "
            "('anonymous': every caller without a key).",
            ["key"],
            registry=r,
        )
        self.rate_limit_fail_open = Counter(
            "photosearch_rate_limit_fail_open_total",
            "Searches let through unchecked because Redis, which keeps the rate limits, "
            "failed, missed its deadline or is being skipped after a failure.",
            registry=r,
        )


def _route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path:
        return str(path)
    # Unmatched paths are one label, or a scanner could create a series per URL.
    return "unmatched"


# Probes and scrapes come every few seconds whatever the load: counting them in flight would
# keep an idle pod from scaling in.
_NOT_IN_FLIGHT = frozenset({"/healthz", "/readyz", "/metrics"})


class MetricsMiddleware:
    """Times each HTTP request and counts error answers, labelled by the route template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        counted = scope["path"] not in _NOT_IN_FLIGHT
        if counted:
            self.metrics.in_flight.inc()
        # The search path times its stages into this (request.state.stages).
        stages = Stages(start)
        scope.setdefault("state", {})["stages"] = stages
        timed: dict[str, float] = {}

        async def send_status(message: Message) -> None:
            nonlocal status, timed
            if message["type"] == "http.response.start":
                status = int(message["status"])
                timed = stages.finished()
                if timed:
                    header = (b"server-timing", server_timing(timed).encode())
                    message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if counted:
                self.metrics.in_flight.dec()
            route = _route_of(scope)
            for stage, seconds in timed.items():
                self.metrics.stage_seconds.labels(route, stage).observe(seconds)
            self.metrics.request_seconds.labels(route, scope["method"], str(status)).observe(
                time.perf_counter() - start
            )
            if status >= 400:
                self.metrics.errors.labels(route, str(status)).inc()
