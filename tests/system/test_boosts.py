"""Business boosts end to end, through the real API, Triton, worker, Redis and store: events
posted on a search's results become popularity (`photosearch feedback popularity`), which the
next increment writes into the payload as any other change (captured for a collection that
follows the live one), and a search boosted by popularity ranks by the formula over it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, VectorStore
from core.vectorstore.boosts import boosted_score
from core.vectorstore.engine import Boosted
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.queue.capture import ChangeLog
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from photosearch.cli import app
from tests.support.api import ADMIN_KEY, SEARCH_KEY, embedded_runtime, serving
from tests.support.indexing import ApiJobs, wait_job, write_photo
from tests.support.waiting import wait_until

ADMIN = {"X-API-Key": ADMIN_KEY}
SEARCH = {"X-API-Key": SEARCH_KEY}
FOLLOWER = "photos-m9-follower"
PHOTOS = 5
HALF = 10.0  # PHOTOSEARCH_API__POPULARITY_HALF's default


@pytest.fixture
def embedded(
    repository: Path, triton: TritonServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, VectorStore, Runtime]]:
    with embedded_runtime(repository, triton.url, tmp_path / "data") as parts:
        settings = parts[0]
        journal = tmp_path / "changes.log"  # a feed, so that the nightly job is an increment
        journal.write_text("")
        settings.indexer.feed = journal.as_uri()
        # The command reads the same Redis keys as the API and the worker.
        monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", settings.redis.prefix)
        get_settings.cache_clear()
        yield parts
        get_settings.cache_clear()


def ranked(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(r["id"], r["score"]) for r in answer["results"]]


def test_events_become_a_popularity_an_increment_writes_and_a_boost_ranks_by(
    embedded: tuple[Settings, VectorStore, Runtime], tmp_path: Path, redis: Redis
) -> None:
    settings, store, runtime = embedded
    root = tmp_path / "photos"
    for i in range(PHOTOS):
        write_photo(root / f"photo{i}.jpg", i)
    with (
        worker_thread(create_app(settings), runtime, queues=all_queues(settings)),
        serving(settings, store) as api,
        httpx.Client(base_url=api.url, headers=ADMIN, timeout=30) as admin,
        httpx.Client(base_url=api.url, headers=SEARCH, timeout=30) as search,
    ):
        jobs = ApiJobs(api.url, ADMIN)
        synced = admin.post("/v1/admin/sync", json={"source": str(root)})
        assert synced.status_code == 202, synced.text
        job = wait_job(jobs, synced.json()["job_id"])
        assert job.state == "done" and job.done == PHOTOS, job
        live = store.resolve(LIVE_ALIAS)
        ChangeLog(redis, settings.redis.prefix).follow(FOLLOWER)

        params: dict[str, str | int | float] = {
            "q": "a photo",
            "mode": "vector",
            "collapse": "false",
            "limit": PHOTOS,
        }
        plain = search.get("/v1/search", params=params).json()
        ids = [pid for pid, _ in ranked(plain)]
        assert len(ids) == PHOTOS
        # The last result is opened and downloaded (1 + 5), the fourth opened (1).
        last, fourth = ids[-1], ids[-2]
        events = [
            {"photo_id": last, "rank": PHOTOS, "action": "opened"},
            {"photo_id": last, "rank": PHOTOS, "action": "downloaded"},
            {"photo_id": fourth, "rank": PHOTOS - 1, "action": "opened"},
        ]
        batch = {"events": [{"search_id": plain["search_id"], **e} for e in events]}
        # The search's record is written after its answer left: the events wait for it.
        wait_until(
            lambda: search.post("/v1/events", json=batch).status_code == 202,
            30,
            "the events were accepted",
        )

        counted = CliRunner().invoke(app, ["feedback", "popularity"])
        assert counted.exit_code == 0, counted.output
        assert "2 photos with events in the last 30 days (3 events" in counted.output
        assert "2 changed" in counted.output

        increment = admin.post("/v1/admin/sync", json={"source": str(root), "kind": "increment"})
        assert increment.status_code == 202, increment.text
        job = wait_job(jobs, increment.json()["job_id"])
        assert job.state == "done", job
        stored = {p.photo_id: p.payload for p in store.retrieve(live, ids)}
        popularity = {pid: payload.get("popularity") for pid, payload in stored.items()}
        assert popularity == {pid: {last: 6.0, fourth: 1.0}.get(pid) for pid in ids}
        # Written as any other change: logged for the collection that follows the live one.
        keys = {stored[last]["source_key"], stored[fourth]["source_key"]}
        assert ChangeLog(redis, settings.redis.prefix).pending(FOLLOWER) == keys

        boosted = search.get("/v1/search", params=params | {"boost_popularity": 0.5}).json()
        again = search.get("/v1/search", params=params | {"boost_popularity": 0}).json()
    assert ranked(again) == ranked(plain)
    # The formula recomputed from the stored fields (no recency: its weight is 0).
    formula = Boosted(0.0, 365 * 86400.0, datetime(2026, 1, 1, tzinfo=UTC), 0.5, HALF)
    by_formula = sorted(
        ((pid, boosted_score(score, stored[pid], formula)) for pid, score in ranked(plain)),
        key=lambda item: (-item[1], item[0]),
    )
    assert [pid for pid, _ in ranked(boosted)] == [pid for pid, _ in by_formula]
    assert [s for _, s in ranked(boosted)] == pytest.approx([s for _, s in by_formula], rel=1e-5)
    assert [pid for pid, _ in ranked(boosted)] != ids  # the popular photos rose
