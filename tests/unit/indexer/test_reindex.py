"""A reindex's last steps on the in-process store and the session's Redis: the switch of the
aliases (once, however often the step runs), the previous collection following the live one
for rollback_days by the test's clock, and what may be dropped."""

from __future__ import annotations

import pytest
from redis import Redis

from core.jobs import JobKind, JobState
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, collection_name
from indexer.records import JobRecords
from indexer.reindex import drop, stale, switch
from indexer.sync import IndexerError, alias_lock
from tests.unit.indexer.conftest import COLLECTION, DIM

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
