"""The nightly sync that a load test starts in the middle of its load, and how it is followed.

With the system's settings (a `photosearch up`), the sync is sent as beat sends it, through
the queue, and followed in Redis. With only a URL, an admin key starts it through the admin
API and the job is read from there, as an operator would.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from core.jobs import FINISHED
from loadtests import photoset
from loadtests.observe import SyncWatch
from loadtests.scenario import Scenario
from loadtests.target import Target, TargetError, say


def churn_photos(target: Target, scenario: Scenario, seed: int) -> dict[str, int]:
    """The day's changes to the owned folder (if any): photos added, rewritten, deleted."""
    assert scenario.sync is not None
    changes = {"added": 0, "changed": 0, "deleted": 0}
    if target.photos is not None:
        s = scenario.sync
        churn = photoset.churn(target.photos, s.add, s.change, s.delete, seed)
        changes = {k: len(getattr(churn, k)) for k in changes}
    return changes


def send_sync(target: Target, changes: dict[str, int]) -> SyncWatch:
    """Send the sync now; `changes` are what the folder's churn did before it."""
    if target.settings is not None:
        job_id, source = _queue(target)
    else:
        job_id, source = _admin(target)
    say(f"nightly sync started: job {job_id} on {source} ({changes})")
    return SyncWatch(job_id, time.time(), changes)


def start_sync(target: Target, scenario: Scenario, seed: int) -> SyncWatch:
    """Change the owned folder (if any), then send the sync."""
    return send_sync(target, churn_photos(target, scenario, seed))


def _queue(target: Target) -> tuple[str, str]:
    assert target.settings is not None
    from core.jobs import Jobs
    from indexer.app import app, configure
    from indexer.tasks import queue_sync

    settings = target.settings
    configure(app, settings)
    jobs = Jobs.from_settings(settings)
    try:
        source = jobs.recall("source") or settings.indexer.source
        if source is None:
            raise TargetError("the system has no source to sync (PHOTOSEARCH_INDEXER__SOURCE)")
        return queue_sync(jobs, source), source
    finally:
        jobs.redis.close()


def _admin_call(target: Target, method: str, path: str, **kwargs: Any) -> Any:
    assert target.admin_key is not None
    response = httpx.request(
        method,
        f"{target.url}{path}",
        headers={"X-API-Key": target.admin_key},
        timeout=10,
        **kwargs,
    )
    if response.status_code >= 400:
        raise TargetError(f"{method} {path}: {response.status_code} {response.text[:300]}")
    return response.json()


def _admin(target: Target) -> tuple[str, str]:
    accepted = _admin_call(target, "POST", "/v1/admin/sync", json={})
    job = _admin_call(target, "GET", f"/v1/admin/jobs/{accepted['job_id']}")
    return str(accepted["job_id"]), str(job.get("source", "?"))


def _read_job(target: Target, job_id: str) -> dict[str, Any] | None:
    if target.settings is None:
        job: dict[str, Any] = _admin_call(target, "GET", f"/v1/admin/jobs/{job_id}")
        job.pop("problems", None)
        return job
    from core.jobs import Jobs

    jobs = Jobs.from_settings(target.settings)
    try:
        status = jobs.get(job_id)
    finally:
        jobs.redis.close()
    return None if status is None else status.to_dict()


def poll_sync(target: Target, watch: SyncWatch) -> bool:
    """Read the job into `watch`; True once it has finished."""
    job = _read_job(target, watch.job_id)
    if job is None:
        return False
    watch.job = job
    finished = job.get("state") in FINISHED
    if finished and watch.finished_at is None:
        watch.finished_at = float(job.get("finished_at") or 0) or time.time()
    return finished
