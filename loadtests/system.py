"""The system under load: the one `photosearch up` runs (found by its up.json, or started here),
or any deployment given by its URL; and the nightly sync a load starts in its middle.

With the system's settings (a `photosearch up`), the sync is sent as beat sends it, through
the queue, and followed in Redis. With only a URL, an admin key starts it through the admin
API and the job is read from there, as an operator would.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.jobs import Jobs
from core.jobstatus import FINISHED
from core.settings import Settings, get_settings
from core.submit import queue_sync
from core.taskqueue import create_celery
from harness import photos as photoset
from harness.up import UpFailed, UpProcess
from loadtests.scenario import Scenario
from photosearch.up.probes import http_ok
from photosearch.up.supervisor import STATE_FILE, read_state
from query_api.http.auth import hash_key, new_key

UP_TIMEOUT_S = 900  # a first start exports the model (a minute or more on two cores)
APP_NAME = "loadtest-app"  # the internal apps' key name, as the API's metrics count it


class TargetError(RuntimeError):
    """No system to load, with what to do about it."""


def starting(up: UpProcess) -> None:
    """Start `up`, or say why it did not come up."""
    try:
        up.start(timeout_s=UP_TIMEOUT_S)
    except UpFailed as exc:
        raise TargetError(str(exc)) from None


def say(line: str) -> None:
    """Progress on stderr (stdout is left to the report's path)."""
    print(f"[loadtest] {line}", file=sys.stderr, flush=True)


@dataclass
class Target:
    url: str
    triton_metrics: str | None = None  # Triton's /metrics, where it is known
    settings: Settings | None = None  # the system's settings, where they are known (up)
    api_key: str | None = None  # the internal apps' key
    admin_key: str | None = None  # --url: a key that may start a sync through the admin API
    photos: Path | None = None  # the photo folder this run owns (--start)
    up: UpProcess | None = field(default=None, repr=False)  # the `photosearch up` it started
    api_metrics: str | None = None  # the API's /metrics: a listener apart from its URL

    @property
    def metrics_url(self) -> str:
        """The API's /metrics: its own listener (up's API__METRICS_PORT) or what --api-metrics
        gave; a deployment's public URL does not serve it."""
        if self.api_metrics is None:
            raise TargetError("the API's /metrics is not known: pass --api-metrics URL")
        return self.api_metrics

    def stop(self) -> None:
        if self.up is not None:
            self.up.stop()


def _from_state(state: dict[str, Any], **fields: Any) -> Target:
    """The target up.json describes, with the settings its processes read: this environment
    plus what up set (as `set -a; . up.env` gives a shell)."""
    env = state.get("env", {})
    os.environ.update(env)
    get_settings.cache_clear()
    settings = get_settings()
    triton = env.get("PHOTOSEARCH_TRITON__METRICS_PORT")
    api = settings.api.metrics_port
    return Target(
        state["url"],
        f"http://127.0.0.1:{triton}/metrics" if triton else None,
        settings,
        api_metrics=f"http://127.0.0.1:{api}/metrics" if api else None,
        **fields,
    )


def attach(data_dir: Path, api_key: str | None) -> Target:
    """The running `photosearch up` of this data directory."""
    try:
        state = read_state(data_dir)
    except (OSError, ValueError) as exc:
        raise TargetError(
            f"no running `photosearch up` in {data_dir} ({exc.__class__.__name__}: "
            f"{data_dir / STATE_FILE}): start one (`photosearch up`), pass --data-dir, --start "
            "to start one here, or --url for another deployment"
        ) from None
    if not http_ok(f"{state['url']}/healthz"):
        where = f"{state['url']} (from {data_dir / STATE_FILE})"
        raise TargetError(f"{where} does not answer: is `photosearch up` up?")
    return _from_state(state, api_key=api_key)


def start(
    data_dir: Path,
    photos: Path,
    port: int,
    redis_port: int,
    log: Path,
    extra_args: Sequence[str] = (),
) -> Target:
    """Start `photosearch up` on `photos` with a key for the internal apps; wait until it has
    indexed them and says it is up. `extra_args`: more of up's options."""
    key = new_key()
    keys = [{"name": APP_NAME, "sha256": hash_key(key), "scopes": ["search"]}]
    # The caller's PHOTOSEARCH_* apply, as they would to `photosearch up`; the keys are ours.
    # The site's visitors all come from this machine's address here: no per-address limit,
    # unless the caller sets one.
    env = {"PHOTOSEARCH_API__ANONYMOUS_RATE_PER_S": "0", **os.environ}
    env["PHOTOSEARCH_API__KEYS"] = json.dumps(keys)
    args = ["--photos", str(photos), "--port", str(port), "--redis-port", str(redis_port)]
    args += extra_args
    say(f"starting photosearch up ({data_dir}); its output: {log}")
    up = UpProcess(data_dir, args, env, log)
    starting(up)
    return _from_state(read_state(data_dir), api_key=key, photos=photos.resolve(), up=up)


# -- the nightly sync ----------------------------------------------------------------------------


@dataclass
class SyncWatch:
    """The sync started mid-load: when it was sent, and its job as it went."""

    job_id: str
    sent_at: float
    changes: dict[str, int]
    job: dict[str, Any] = field(default_factory=dict)
    finished_at: float | None = None


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
        settings = target.settings
        jobs, app = Jobs.from_settings(settings), create_celery(settings)
        try:
            source = jobs.recall("source") or settings.indexer.source
            if source is None:
                raise TargetError("the system has no source to sync (PHOTOSEARCH_INDEXER__SOURCE)")
            job_id = queue_sync(app, jobs, source)
        finally:
            app.close()
            jobs.redis.close()
    else:
        job_id = str(_admin(target, "POST", "/v1/admin/sync", json={})["job_id"])
        source = str(_admin(target, "GET", f"/v1/admin/jobs/{job_id}").get("source", "?"))
    say(f"nightly sync started: job {job_id} on {source} ({changes})")
    return SyncWatch(job_id, time.time(), changes)


def start_sync(target: Target, scenario: Scenario, seed: int) -> SyncWatch:
    """Change the owned folder (if any), then send the sync."""
    return send_sync(target, churn_photos(target, scenario, seed))


def _admin(target: Target, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    assert target.admin_key is not None
    headers = {"X-API-Key": target.admin_key}
    response = httpx.request(method, f"{target.url}{path}", headers=headers, timeout=10, **kwargs)
    if response.status_code >= 400:
        raise TargetError(f"{method} {path}: {response.status_code} {response.text[:300]}")
    body: dict[str, Any] = response.json()
    return body


def _read_job(target: Target, job_id: str) -> dict[str, Any] | None:
    if target.settings is None:
        job = _admin(target, "GET", f"/v1/admin/jobs/{job_id}")
        job.pop("problems", None)
        return job
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
