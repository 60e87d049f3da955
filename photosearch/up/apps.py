"""PhotoSearch's own processes as `photosearch up` starts them, in order: the API (with the
indexer's worker on its threads when the store is embedded, since Qdrant Edge admits one
owning process), the worker of its own with a Qdrant server, and beat."""

from __future__ import annotations

import sys
from pathlib import Path

from core.settings import Settings
from photosearch.up.probes import http_ok
from photosearch.up.processes import Child


def app_children(settings: Settings, logs: Path, base_url: str) -> list[Child]:
    """The children that run PhotoSearch, logging into `logs`; the API is ready when
    `base_url`'s /healthz answers."""
    python = [sys.executable, "-m", "photosearch"]
    embedded = settings.qdrant.url is None
    api = [*python, "serve-embedded"] if embedded else [*python, "api", "serve"]
    children = [
        Child(
            "api",
            api,
            logs / "api.log",
            ready=lambda: http_ok(f"{base_url}/healthz"),
            startup_timeout_s=120,
            # uvicorn's 10 s of grace, then the worker finishes the tasks it holds.
            stop_timeout_s=90,
        )
    ]
    if not embedded:
        children.append(
            Child("worker", [*python, "worker"], logs / "worker.log", stop_timeout_s=90)
        )
    children.append(Child("beat", [*python, "beat"], logs / "beat.log"))
    return children
