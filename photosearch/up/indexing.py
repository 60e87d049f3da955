"""What `up` indexes once its children run: the photos' source, then the sync or reindex."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.settings import Settings
from photosearch.up.bootstrap import ModelChoice, is_folder, photos_source
from photosearch.up.probes import readyz


def source_to_index(settings: Settings, photos: Path | None, say: Callable[[str], None]) -> str:
    """--photos, else the source synced before (remembered in Redis), else the demo photos."""
    from core.jobs import Jobs

    jobs = Jobs.from_settings(settings)
    try:
        remembered = jobs.recall("source")
    finally:
        jobs.redis.close()
    return photos_source(
        photos, remembered, settings.indexer.source, settings.data_dir / "demo-photos", say
    )


def wait_ready(
    probe: Callable[[], dict[str, Any] | None],
    *,
    ceiling_s: float,
    poll_s: float = 0.5,
    now: Callable[[], float] = time.monotonic,
    wait: Callable[[float], bool] | None = None,
) -> tuple[bool, dict[str, Any] | None]:
    """Probe until the API says it is ready, `ceiling_s` by the clock `now` at most, `wait(s)`
    between probes (an event's wait: True when it was set, which ends the wait early). Whether
    it is ready, and its last answer (None when it did not answer)."""
    pause = wait if wait is not None else threading.Event().wait
    deadline = now() + ceiling_s
    while (body := probe()) is None or body.get("status") == "not ready":
        if now() > deadline or pause(poll_s):
            return False, body
    return True, body


def index_then_announce(
    settings: Settings,
    model: ModelChoice | None,
    source: str,
    base_url: str,
    say: Callable[[str], None],
    *,
    now: Callable[[], float] = time.monotonic,
    wait: Callable[[float], bool] | None = None,
) -> None:
    """Sync the photos (only what changed), or reindex into a newly exported model; then say
    where the page is, once the API is ready (`wait_ready` by the clock `now`)."""
    data_dir = settings.data_dir
    try:
        from core.jobs import Jobs
        from core.jobstatus import JobState
        from core.submit import queue_sync, submit_reindex
        from core.taskqueue import create_celery
        from indexer.cli import follow

        tasks = create_celery(settings)
        jobs = Jobs.from_settings(settings)
        live = ((readyz(base_url) or {}).get("checks") or {}).get("vector_store", {})
        if model is not None and model.exported and live.get("ok"):
            version = model.manifest.version
            submitted = submit_reindex(tasks, jobs, version, source)
            if submitted.refused:  # a failed reindex to resume or drop first: say which
                say(f"reindex refused: {submitted.refused}")
            job_id = submitted.job_id
            label = f"reindexing {source} with model version {version}"
        else:
            # Leaving the demo photos for --photos deletes them all: the delete guard's
            # business is a wrong folder, not the demo (any other switch is still guarded).
            before = jobs.recall("source")
            demo = settings.data_dir / "demo-photos"
            leaving_demo = before is not None and is_folder(before, demo)
            job_id = queue_sync(
                tasks, jobs, source, force=leaving_demo and not is_folder(source, demo)
            )
            label = f"indexing {source}"
        say(f"{label} (job {job_id})")
        job = follow(jobs, job_id, label="indexing")
        if job.state == JobState.FAILED:
            say(f"indexing failed: {job.message}; the API serves what was indexed")
        ready, body = wait_ready(lambda: readyz(base_url), ceiling_s=120, now=now, wait=wait)
        if not ready:
            say(f"the API is not ready: {body}")
            return
        say(f"PhotoSearch is up: {base_url}/  (Ctrl-C stops everything)")
        say(f"other shells: set -a; . {data_dir / 'up.env'}; photosearch index status")
    except Exception as exc:
        say(f"indexing could not be followed: {exc!r}; see {data_dir / 'logs'}")
