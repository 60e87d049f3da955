"""The admin API checks a source before any job starts: a refused one is a 422 with the reason,
and nothing is queued or deleted. No Triton: these routes never embed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from core.jobs import Jobs
from core.settings import Settings
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore, collection_name
from tests.support.api import ADMIN_KEY, api_settings, own_store, serving

ADMIN = {"X-API-Key": ADMIN_KEY}


@dataclass
class Admin:
    client: httpx.Client
    settings: Settings
    store: VectorStore
    collection: str


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admin]:
    """The real app with a live collection of three points, its Triton unreachable."""
    tmp = tmp_path_factory.mktemp("admin")
    settings = api_settings(tmp / "data", "127.0.0.1:9", tmp / "models")
    collection = collection_name(1, "sources")
    with own_store(settings) as store:
        store.create_collection(collection, 4)
        vectors = np.eye(4, dtype=np.float32)
        store.upsert(
            collection,
            [PhotoPoint(f"p{i}.jpg", vectors[i], {"photo_id": f"p{i}.jpg"}) for i in range(3)],
        )
        store.set_aliases({LIVE_ALIAS: collection})
        with (
            serving(settings, store) as server,
            httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as client,
        ):
            yield Admin(client, settings, store, collection)


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/admin/sync", {"source": "file://evil.example.com/etc"}, "names no host"),
        ("/v1/admin/sync", {"source": "etc/photos"}, "a relative path"),
        ("/v1/admin/sync", {"source": "file:///data?x#y"}, "query or fragment"),
        ("/v1/admin/sync", {"source": "gopher://host/etc"}, "unsupported scheme 'gopher'"),
    ],
)
def test_a_refused_source_is_a_422_with_the_reason_and_nothing_is_deleted(
    admin: Admin, path: str, body: dict[str, object], says: str
) -> None:
    """Row 6: `file://evil.example.com/etc` listed the local /etc."""
    jobs = Jobs.from_settings(admin.settings)
    try:
        before = [job.id for job in jobs.recent()]
        answer = admin.client.post(path, json=body)
        assert answer.status_code == 422, answer.text
        assert says in answer.json()["message"], answer.json()
        assert [job.id for job in jobs.recent()] == before  # no job queued
        assert jobs.recall("source") is None  # nor remembered for the nightly sync
    finally:
        jobs.redis.close()
    assert admin.store.count(admin.collection) == 3


def test_a_source_outside_the_allowed_roots_is_refused_and_an_allowed_one_normalized(
    admin: Admin, tmp_path: Path
) -> None:
    admin.settings.sources.allowed_roots = (tmp_path.as_uri(),)
    jobs = Jobs.from_settings(admin.settings)
    try:
        outside = admin.client.post("/v1/admin/sync", json={"source": str(tmp_path) + "2"})
        assert outside.status_code == 422, outside.text
        assert "not under an allowed root" in outside.json()["message"]
        assert jobs.recent() == []
        # Queued (no worker runs here), under the one spelling every later request matches.
        inside = admin.client.post("/v1/admin/sync", json={"source": f"{tmp_path}/a/../"})
        assert inside.status_code == 202, inside.text
        job = jobs.get(inside.json()["job_id"])
        assert job is not None and job.source == tmp_path.as_uri()
    finally:
        admin.settings.sources.allowed_roots = ()
        jobs.redis.close()
    assert admin.store.count(admin.collection) == 3
