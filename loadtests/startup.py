"""What the benchmarks start the same way, in one place: the query API on a store with the
operator's key, and the heading of a report (the machine, the commit, the command)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.machine import commit, machine
from harness.processes import api_process, free_ports, process_env, running
from loadtests.openloop import OPERATOR_KEY
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


def command(module: str) -> str:
    """How this run was started, as a reader reruns it."""
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def heading(module: str) -> list[str]:
    """A report's first lines: where and when it ran, and the command that reruns it."""
    return [f"{machine()}, commit {commit()}, {datetime.now():%Y-%m-%d %H:%M}", command(module)]
