"""What `photosearch up` decides before it starts anything: what runs embedded, the ports it
holds for what it starts, and the environment every child inherits, so that every process
reads one settings tree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.settings import Settings
from model.triton_server import new_control_key
from photosearch.up.ports import PortBook

# The children that reach a port's server: they start again when it moves.
READERS = {
    "Redis": ("api", "worker", "beat"),
    "Redis cache": ("api", "worker"),  # the worker pre-warms the cache before a switch
    "Triton gRPC": ("api", "worker"),
}


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path | None = None
    host: str | None = None
    port: int | None = None
    photos: Path | None = None
    pretrained: str | None = None
    arch: str = "ViT-B-32"
    redis_port: int | None = None
    precision: str | None = None  # None: the newest version's, the host's for a first export
    fallback: bool = False  # with a precision: fp32 for an encoder below the floor


def up_environment(opts: UpOptions, given: Settings, book: PortBook) -> tuple[dict[str, str], str]:
    """The environment `up` gives its children over `given`, the settings it started with, and
    the API's base URL; the ports of what it starts are held in `book` meanwhile."""
    env = {"PHOTOSEARCH_DATA_DIR": str(given.data_dir)}
    book.keep_in(given.data_dir)  # the ports of its earlier starts, where still free
    named = bool(opts.redis_port)
    if "url" not in given.redis.model_fields_set:
        firm = "--redis-port" if opts.redis_port else None
        url = {"PHOTOSEARCH_REDIS__URL": "redis://127.0.0.1:{}/0"}
        book.take("Redis", opts.redis_port or 6379, "redis", url, firm=firm, chosen=named)
    if "cache_url" not in given.redis.model_fields_set:
        # The cache's own bounded Redis, on the port after the broker's where it is free.
        cache = {"PHOTOSEARCH_REDIS__CACHE_URL": "redis://127.0.0.1:{}/0"}
        preferred = (opts.redis_port or 6379) + 1
        book.take("Redis cache", preferred, "redis-cache", cache, chosen=named)
    if "url" not in given.triton.model_fields_set:
        t, var = given.triton, "PHOTOSEARCH_TRITON__"
        given_t = t.model_fields_set
        grpc = {f"{var}GRPC_PORT": "{}", f"{var}URL": "127.0.0.1:{}"}
        book.take("Triton gRPC", t.grpc_port, "triton", grpc, chosen="grpc_port" in given_t)
        http = {f"{var}HTTP_PORT": "{}"}
        book.take("Triton HTTP", t.http_port, "triton", http, chosen="http_port" in given_t)
        metrics, chosen = {f"{var}METRICS_PORT": "{}"}, "metrics_port" in given_t
        book.take("Triton metrics", t.metrics_port, "triton", metrics, chosen=chosen)
        if t.control_key is None:
            # A key of this start's own for loading and unloading models: the children
            # and up.env (which only this user reads) carry it, no other local process.
            env[f"{var}CONTROL_KEY"] = new_control_key()
    # The page is for people without a key; a deployment decides this for itself.
    if "PHOTOSEARCH_API__ANONYMOUS_SEARCH" not in os.environ:
        env["PHOTOSEARCH_API__ANONYMOUS_SEARCH"] = "true"
    host = opts.host or given.api.host
    api = {"PHOTOSEARCH_API__PORT": "{}"}
    chosen = opts.port is not None or "port" in given.api.model_fields_set
    port = book.take(
        "API", opts.port or given.api.port, "api", api, host=host, firm="--port", chosen=chosen
    )
    if given.api.metrics_port:  # 0: the API serves no metrics listener
        metrics = {"PHOTOSEARCH_API__METRICS_PORT": "{}"}
        book.take(
            "API metrics",
            given.api.metrics_port,
            "api",
            metrics,
            host=given.api.metrics_host,
            chosen="metrics_port" in given.api.model_fields_set,
        )
    env["PHOTOSEARCH_API__HOST"] = host
    return env, f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
