"""Through the API: sync, a reindex to model version 2 while searches run, the pre-warmed switch,
and rollback — the admin routes driving a real Celery worker over the real Redis queue.

Qdrant Edge admits one process per store, so this test process owns it and runs both the API
and the worker on its threads, as the embedded mode does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.jobs import Jobs
from core.settings import Settings
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, VectorStore, model_version_of
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, SEARCH_KEY, embed_texts, embedded_runtime, serving
from tests.support.indexing import ApiJobs, photo_folder, wait_idle, wait_job
from tests.support.waiting import wait_until

ADMIN = {"X-API-Key": ADMIN_KEY}
SEARCH = {"X-API-Key": SEARCH_KEY}
POPULAR = "a cat asleep on a sofa"
LOOP_QUERIES = ("a dog", "mountains at dusk", "a bowl of soup", "the night sky")


@dataclass(eq=False)
class SearchLoop(threading.Thread):
    """Searches the API without pause; keeps every answer."""

    url: str
    answers: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers=SEARCH, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                q = LOOP_QUERIES[n % len(LOOP_QUERIES)]
                # The ranking is checked against the store's vector search: that mode, every photo.
                params: dict[str, str | int] = {
                    "q": q,
                    "limit": 5,
                    "mode": "vector",
                    "collapse": "false",
                }
                response = client.get("/v1/search", params=params)
                self.answers.append((q, response.status_code, response.json()))
                n += 1
                self.stop.wait(0.02)  # a steady pace, which ends as the loop stops


@pytest.fixture
def embedded(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> Iterator[tuple[Settings, VectorStore, Runtime]]:
    repo, server = two_versions
    with embedded_runtime(repo, server.url, tmp_path / "data") as parts:
        yield parts


def first_answer_from(admin: httpx.Client, collection: str, settings: Settings) -> Any:
    """The first answer to POPULAR from `collection`, which a switch made live: each replica
    keeps the live collection's name for alias_cache_s, so it comes after that time (the
    ceiling only bounds a hang)."""

    def answered() -> Any:
        body = admin.get("/v1/search", params={"q": POPULAR}).json()
        return body if body["collection"] == collection else None

    return wait_until(answered, settings.api.alias_cache_s + 60, f"an answer from {collection}")


def test_reindex_through_the_api_keeps_query_and_collection_versions_equal_and_prewarms(
    embedded: tuple[Settings, VectorStore, Runtime], tmp_path: Path
) -> None:
    settings, store, runtime = embedded
    root = tmp_path / "photos"
    photo_folder(root, 16)
    queues = all_queues(settings)
    with (
        worker_thread(create_app(settings), runtime, queues=queues),
        serving(settings, store) as api,
        httpx.Client(base_url=api.url, headers=ADMIN, timeout=30) as admin,
        httpx.Client(base_url=api.url, headers=SEARCH, timeout=30) as search,
    ):
        refused = admin.post("/v1/admin/rollback")
        assert refused.status_code == 409
        assert "nothing to roll back to" in refused.json()["message"]

        accepted = admin.post("/v1/admin/sync", json={"source": str(root)})
        assert accepted.status_code == 202, accepted.text
        job = wait_job(ApiJobs(api.url, ADMIN), accepted.json()["job_id"])
        assert job.state == "done" and job.done == 16, job
        v1 = store.resolve(LIVE_ALIAS)

        # Whether the cache answered is told to an operator's (admin) key only.
        for n in range(3):
            body = admin.get("/v1/search", params={"q": POPULAR}).json()
            assert body["model_version"] == 1 and body["cached"] is (n > 0)
        assert search.get("/v1/search", params={"q": POPULAR}).json()["cached"] is None

        loop = SearchLoop(api.url)
        loop.start()
        started = admin.post("/v1/admin/reindex", json={"model_version": 2})
        assert started.status_code == 202, started.text
        job = wait_job(ApiJobs(api.url, ADMIN), started.json()["job_id"])
        # The first search that reaches the new collection (a replica reuses the live name
        # for alias_cache_s): already embedded with version 2 before the switch.
        after = first_answer_from(admin, store.resolve(LIVE_ALIAS), settings)
        wait_idle(Jobs.from_settings(settings))
        # The loop's searches go on across the switch, to the new collection.
        live = store.resolve(LIVE_ALIAS)
        wait_until(
            lambda: any(body.get("collection") == live for _, _, body in loop.answers),
            60,
            "the search loop answered from the new collection",
        )
        loop.stop.set()
        loop.join()

        assert job.state == "done", job
        assert "popular queries pre-warmed" in job.message
        v2 = store.resolve(LIVE_ALIAS)
        assert model_version_of(v2) == 2
        assert after["model_version"] == 2 and after["collection"] == v2
        assert after["cached"] is True

        failures = [(q, status, body) for q, status, body in loop.answers if status != 200]
        assert failures == []
        served = {body["collection"] for _, _, body in loop.answers}
        assert served == {v1, v2}
        # Every answer: the query embedded with the version of the collection it searched,
        # so its ranking equals the store's own search with that version's embedding.
        expected: dict[tuple[str, str], list[str]] = {}
        for q, _, body in loop.answers:
            collection = body["collection"]
            assert body["model_version"] == model_version_of(collection)
            if (q, collection) not in expected:
                [vector] = asyncio.run(embed_texts(settings, [q], model_version_of(collection)))
                hits = store.search(collection, vector, limit=5)
                expected[q, collection] = [hit.photo_id for hit in hits]
            assert [r["id"] for r in body["results"]] == expected[q, collection], (q, collection)
            assert all(r["model_version"] == body["model_version"] for r in body["results"])

        rolled = admin.post("/v1/admin/rollback")
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["state"] == "done" and v1 in rolled.json()["message"]
        back = first_answer_from(admin, v1, settings)
        assert back["collection"] == v1 and back["model_version"] == 1 and back["cached"] is True
        kinds = [j["kind"] for j in admin.get("/v1/admin/jobs").json()]
        assert {"sync", "reindex", "rollback"} <= set(kinds)
        collections = {c["name"]: c for c in admin.get("/v1/admin/collections").json()}
        assert collections[v1]["aliases"] == ["photos"] and collections[v2]["points"] == 16
        admin.close()
        search.close()
