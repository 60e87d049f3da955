"""Helpers of the fault suite: steady search traffic recorded per answer, and a running
`photosearch up` driven through its admin API (syncs, jobs, the index)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.vectorstore import LIVE_ALIAS
from query_api.http.auth import hash_key
from tests.support.indexing import ApiJobs
from tests.support.upprocess import Up

ADMIN_KEY = "ps_faults-admin-key"
KEYS = [{"name": "faults-admin", "sha256": hash_key(ADMIN_KEY), "scopes": ["search", "admin"]}]
ADMIN = {"X-API-Key": ADMIN_KEY}


@dataclass(frozen=True)
class Answer:
    """One search as its caller saw it."""

    at: float  # time.monotonic() when it was sent
    seconds: float
    q: str
    status: int  # 0: no HTTP answer at all (refused, reset, timed out)
    cached: bool | None
    error: str
    retry_after: str | None


@dataclass
class SearchLoad:
    """Threads that search steadily, one request after another, and keep every answer."""

    url: str
    queries: list[str]
    threads: int = 3
    pause_s: float = 0.05
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> SearchLoad:
        for n in range(self.threads):
            thread = threading.Thread(target=self._run, args=(n,), daemon=True)
            thread.start()
            self._workers.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(60)

    def _run(self, n: int) -> None:
        i = n
        # The operator's key: only it is told whether the cache answered (`cached`).
        with httpx.Client(timeout=30, headers=ADMIN) as client:
            while not self._stop.is_set():
                q = self.queries[i % len(self.queries)]
                i += self.threads
                self.answers.append(self._one(client, q))
                self._stop.wait(self.pause_s)  # a steady pace, which ends as the load stops

    def _one(self, client: httpx.Client, q: str) -> Answer:
        start = time.monotonic()
        try:
            response = client.get(self.url + "/v1/search", params={"q": q, "limit": 5})
        except httpx.HTTPError as exc:
            return Answer(start, time.monotonic() - start, q, 0, None, repr(exc), None)
        seconds = time.monotonic() - start
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        return Answer(
            start,
            seconds,
            q,
            response.status_code,
            body.get("cached"),
            body.get("error", ""),
            response.headers.get("retry-after"),
        )

    def between(self, start: float, end: float) -> list[Answer]:
        return [a for a in list(self.answers) if start <= a.at <= end]

    def summary(self, start: float, end: float) -> str:
        """What the callers saw while a process was down, for the log (pytest -rP)."""
        outage = self.between(start, end)
        statuses: dict[str, int] = {}
        for a in outage:
            kind = f"{a.status}{' cached' if a.cached else ''}"
            statuses[kind] = statuses.get(kind, 0) + 1
        slowest = max((a.seconds for a in outage), default=0.0)
        return (
            f"down {end - start:.1f} s: {len(outage)} searches {statuses}, "
            f"slowest {slowest:.2f} s; {len(self.answers)} searches in all"
        )


def admin(up: Up, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, up.url + path, headers=ADMIN, timeout=30, **kwargs)


def start_sync(up: Up, source: str) -> str:
    response = admin(up, "POST", "/v1/admin/sync", json={"source": source})
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def jobs_of(up: Up) -> ApiJobs:
    """Its job records, read through the admin API (for `wait_job`)."""
    return ApiJobs(up.url, ADMIN)


def live_points(up: Up) -> int:
    """Points in the collection searches read."""
    response = admin(up, "GET", "/v1/admin/collections")
    assert response.status_code == 200, response.text
    live = [c for c in response.json() if LIVE_ALIAS in c["aliases"]]
    assert len(live) == 1, response.json()
    points: int = live[0]["points"]
    return points


def missing_photos(up: Up, photo_ids: list[str]) -> list[str]:
    """The photos the API cannot find by id."""
    missing = []
    with httpx.Client(timeout=30) as client:
        for photo_id in photo_ids:
            if client.get(f"{up.url}/v1/photos/{photo_id}").status_code != 200:
                missing.append(photo_id)
    return missing
