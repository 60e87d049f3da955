"""A reindex's last steps on the in-process store and the session's Redis: the switch of the
aliases (once, however often the step runs), the previous collection following the live one
for rollback_days by the test's clock, what may be dropped, and the cache warmed for the new
model version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest
from redis import Redis

from core.embedding.arrays import Embeddings
from core.embedding.errors import TritonUnavailable
from core.jobs import JobKind, JobState
from core.querycache import cache_key, popular_key
from core.settings_api import ApiSettings
from core.sources import LocalSource
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, collection_name
from indexer.catalog import read_catalog
from indexer.records import JobRecords
from indexer.reindex import check, drop, stale, switch, warm_cache
from indexer.sync import IndexerError, alias_lock
from tests.unit.indexer.conftest import COLLECTION, DIM, PHOTOS, EmbedBatch

NEW = collection_name(2, "next")
DAY = 86400.0


@pytest.fixture
def reindexed(store: VectorStore, records: JobRecords) -> str:
    """COLLECTION live and a reindex into NEW that holds the live lock since t=1000."""
    store.create_collection(NEW, DIM)
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    job_id = records.jobs.create(JobKind.REINDEX)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=NEW, locked_at=1000.0)
    return job_id


def test_the_switch_moves_the_aliases_once_and_the_old_collection_follows_the_new(
    reindexed: str, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    def step() -> None:
        switch(
            reindexed,
            store=store,
            records=records,
            lock=alias_lock(redis, records.jobs.prefix),
            rollback_days=7,
            now=lambda: 1002.5,
        )

    step()
    step()  # a run of the step that died after the switch changes nothing more
    assert store.aliases() == {LIVE_ALIAS: NEW, PREVIOUS_ALIAS: COLLECTION}
    assert records.capture.followers() == {COLLECTION: 1002.5 + 7 * DAY}
    job = records.jobs.get(reindexed)
    assert job is not None
    assert (job.state, job.lock_s) == (JobState.DONE, 2.5)
    assert job.message.startswith(f"{LIVE_ALIAS} switched from {COLLECTION} to {NEW}")


def test_a_previous_collection_is_stale_once_it_stopped_following(
    records: JobRecords,
) -> None:
    assert "has received no change since the switch" in str(
        stale(records.capture, COLLECTION, rollback_days=7)
    )
    records.capture.follow(COLLECTION, until=2000.0)
    assert stale(records.capture, COLLECTION, rollback_days=7, now=lambda: 1999.0) is None
    why = stale(records.capture, COLLECTION, rollback_days=7, now=lambda: 2001.0)
    assert why is not None and "stopped receiving changes at 1970-01-01 00:33 UTC" in why


def test_the_live_collection_is_never_dropped_and_a_previous_one_is(
    reindexed: str, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    lock = alias_lock(redis, records.jobs.prefix)
    store.set_aliases({LIVE_ALIAS: NEW, PREVIOUS_ALIAS: COLLECTION})
    with pytest.raises(IndexerError, match="is live"):
        drop(NEW, store=store, records=records, lock=lock)
    assert drop(COLLECTION, store=store, records=records, lock=lock) == f"dropped {COLLECTION}"
    assert store.aliases() == {LIVE_ALIAS: NEW}
    with pytest.raises(IndexerError, match="no collection"):
        drop(COLLECTION, store=store, records=records, lock=lock)


def test_the_popular_queries_are_warmed_at_the_new_version_and_a_failure_is_only_noted(
    records: JobRecords, redis: Redis
) -> None:
    """Triton's text encoder is stood in for by fixed vectors: it cannot run in a unit test."""
    prefix = records.jobs.prefix
    redis.zincrby(popular_key(prefix, datetime.now(UTC)), 3, "a cat")
    redis.zincrby(popular_key(prefix, datetime.now(UTC)), 1, "a dog")
    asked: list[tuple[list[str], int]] = []

    def embed(texts: Sequence[str], version: int) -> Embeddings:
        asked.append((list(texts), version))
        return np.full((len(texts), DIM), 1 / np.sqrt(DIM), dtype=np.float32)

    api = ApiSettings(prewarm_queries=10, popular_days=1)
    job_id = records.jobs.create(JobKind.REINDEX)
    warmed = warm_cache(
        job_id, 2, redis=redis, prefix=prefix, jobs=records.jobs, embed=embed, api=api
    )
    assert (warmed, asked) == (2, [(["a cat", "a dog"], 2)])
    assert redis.exists(cache_key(prefix, 2, "a cat"), cache_key(prefix, 2, "a dog")) == 2

    def down(texts: Sequence[str], version: int) -> Embeddings:
        raise TritonUnavailable("connection refused")

    assert (
        warm_cache(job_id, 3, redis=redis, prefix=prefix, jobs=records.jobs, embed=down, api=api)
        == 0
    )
    assert records.jobs.problems(job_id) == [
        "cache pre-warm skipped: TritonUnavailable: connection refused"
    ]


def test_a_new_collection_that_lost_a_photo_is_not_fit_to_switch(
    reindexed: str,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    embed_batch: EmbedBatch,
) -> None:
    """The photos are embedded with the stand-in of Triton's image encoder (conftest.py)."""
    photos = [(photo, "") for photo in read_catalog(source, ()).photos.values()]
    for collection in (COLLECTION, NEW):
        embed_batch(photos, collection)
    job = records.jobs.get(reindexed)
    assert job is not None

    def problems() -> list[str]:
        return check(job, store=store, source=source, records=records, samples=PHOTOS)

    assert problems() == []
    store.delete(NEW, [photos[0][0].photo_id])
    assert problems() != []
