"""What the benchmarks start the same way, in one place: the query API (beside its Triton) on a
store with the operator's key, the embedded store alone, and the heading of a report (the
machine, the commit, the command)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.machine import commit, machine
from harness.processes import api_process, free_ports, process_env, running, triton_ports
from loadtests.openloop import OPERATOR_KEY
from model.triton_server import TritonServer
from query_api.http.auth import hash_key

# The operator's key, the API's only one: only it is told per answer whether the cache answered.
OPERATOR_KEYS = json.dumps(
    [{"name": "bench", "sha256": hash_key(OPERATOR_KEY), "scopes": ["search", "admin"]}]
)


@contextmanager
def api(values: dict[str, Any], log: Path, log_level: str = "warning") -> Iterator[str]:
    """`photosearch api serve` on the store of `values`, the operator's key its only one, and
    127.0.0.1 allowed to an image search by URL: its base URL."""
    port, metrics_port = free_ports(2)
    settings = values | {
        "api": {
            **values.get("api", {}),
            "keys": OPERATOR_KEYS,
            "metrics_port": metrics_port,
            "image_url_allow": json.dumps(["127.0.0.1"]),
        }
    }
    with running(api_process(process_env(settings), port, log, log_level)):
        yield f"http://127.0.0.1:{port}"


def api_environment(name: str, data_dir: Path) -> str:
    """Point this process's settings, which the API process inherits, at the store in
    `data_dir`, with anonymous search and the operator's key, and Redis keys under a prefix of
    this run's own (the cache starts empty): that prefix."""
    prefix = f"bench-{name}-{os.getpid()}-{int(time.time())}"
    os.environ.update(
        {
            "PHOTOSEARCH_DATA_DIR": str(data_dir),
            "PHOTOSEARCH_REDIS__PREFIX": prefix,
            "PHOTOSEARCH_API__ANONYMOUS_SEARCH": "true",
            "PHOTOSEARCH_API__KEYS": OPERATOR_KEYS,
        }
    )
    return prefix


@dataclass(frozen=True)
class Served:
    url: str  # the API's
    metrics: str  # the API's /metrics
    triton: TritonServer


@contextmanager
def api_beside_triton(repo: Path, work: Path, redis_url: str, log_level: str) -> Iterator[Served]:
    """Triton serving `repo`, and `photosearch api serve` beside it with this process's
    settings (api_environment's), its log in work/api.log."""
    with TritonServer(repo, triton_ports(), work / "triton") as triton:
        port, metrics_port = free_ports(2)
        env = os.environ | {
            "PHOTOSEARCH_REDIS__URL": redis_url,
            "PHOTOSEARCH_TRITON__URL": triton.url,
            "PHOTOSEARCH_API__METRICS_PORT": str(metrics_port),
        }
        print("starting the API ...", flush=True)
        with running(api_process(env, port, work / "api.log", log_level)):
            yield Served(
                f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", triton
            )


def command(module: str) -> str:
    """How this run was started, as a reader reruns it."""
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def ran() -> str:
    """Where and when: the figures of one machine and commit compare."""
    return f"{machine()}, commit {commit()}, {datetime.now():%Y-%m-%d %H:%M}"


def heading(title: str, module: str, note: str = "") -> list[str]:
    """A Markdown report's first lines: its title, where and when it ran, and the command that
    reruns it."""
    return [title, "", ran() + note, "", f"    {command(module)}", ""]


def embedded_store_only(why: str) -> None:
    """Drop a Qdrant server's or folder's settings from the environment: the benchmark measures
    the embedded store in its own --data-dir."""
    for name in ("PHOTOSEARCH_QDRANT__URL", "PHOTOSEARCH_QDRANT__PATH"):
        if os.environ.pop(name, None) is not None:
            print(f"note: {name} ignored: {why}")
