"""A sync on a folder of tiny photos and the in-process store, its rounds run here as the
plan and embed tasks run them (indexer/tasks.py), without a broker or a worker: the live
collection made once, every photo indexed, a re-sync that changes nothing, a held shard's
round of its own, and the refusals of an increment.

Triton's image encoder is stood in for (tests/unit/indexer/conftest.py): it cannot run in a
unit test.
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import pytest
from redis import Redis

from core.embedding.manifest import write_manifest
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource, Source
from core.vectorstore import LIVE_ALIAS, VectorStore, collection_name
from indexer.jobs.sync import (
    IndexerError,
    alias_lock,
    finish_sync,
    live_collection,
    nightly_kind,
    start_increment,
    start_sync,
)
from indexer.plan.deleteguard import DeletesRefused, refuse
from indexer.plan.planner import plan_shard
from indexer.queue.messages import ShardUnit
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION, DIM, PHOTOS, EmbedBatch, MeanColours

# Each pass publishes what the round has room for; a round of these few photos ends in a
# handful. The ceiling only bounds a round that never ends.
MAX_PASSES = 50


class Rounds:
    """The tasks' loop, in-process: publish tokens, plan the units, embed the batches."""

    def __init__(
        self,
        embed: EmbedBatch,
        *,
        source: Source,
        store: VectorStore,
        records: JobRecords,
        readers: Executor,
        settings: IndexerSettings,
    ) -> None:
        self.embed_batch = embed
        # What the plan tasks take of their worker's Runtime; a test may change one.
        self.source, self.store, self.records = source, store, records
        self.readers, self.settings = readers, settings
        self.work, self.jobs = records.work, records.jobs

    def run(self, job_id: str) -> None:
        for _ in range(MAX_PASSES):
            job = self.jobs.get(job_id)
            assert job is not None
            if job.state in FINISHED or self.work.round_done(job_id, job.round):
                return
            tokens = self.work.reserve(
                job_id, max_embed=4, max_plan=2, plan_ahead=8, ttl_s=600, lease_s=600
            )
            for token in tokens.plan:
                self.plan(job, token)
            for token in tokens.embed:
                self.embed(job, token)
        raise AssertionError(f"the round did not end in {MAX_PASSES} passes")

    def plan(self, job: JobStatus, token: str) -> None:
        unit = self.work.claim_unit(job.id, token)
        if unit is None:
            self.work.release(job.id, token)
            return
        assert isinstance(unit, ShardUnit)
        try:
            planned = plan_shard(
                job,
                unit.shard,
                source=self.source,
                store=self.store,
                records=self.records,
                readers=self.readers,
                settings=self.settings,
                worker="w1",
                confirm=unit.confirm,
            )
        except DeletesRefused as exc:  # as the plan task ends a refused job
            refuse(self.jobs, self.work, job.id, str(exc))
            self.work.release(job.id, token)
            return
        self.work.commit(
            job.id,
            token,
            unit.id,
            planned.record,
            batches=planned.batches,
            units=planned.units,
            counts=planned.counts,
        )

    def embed(self, job: JobStatus, token: str) -> None:
        claimed = self.work.claim_batch(job.id, token)
        if claimed is None:
            self.work.release(job.id, token)
            return
        assert claimed.body is not None
        result = self.embed_batch(claimed.body.photos, job.collection, job.model_version)
        counts = {"done": len(result.done), "skipped": len(result.skipped)}
        self.work.complete(job.id, token, claimed.id, counts)


@pytest.fixture
def rounds(
    embed_batch: EmbedBatch,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
) -> Rounds:
    return Rounds(
        embed_batch,
        source=source,
        store=store,
        records=records,
        readers=readers,
        settings=settings,
    )


def sync(records: JobRecords, source: LocalSource, store: VectorStore, rounds: Rounds) -> JobStatus:
    """A whole sync: started, its rounds run, ended as the finalize task ends it."""
    job_id = records.jobs.create(JobKind.SYNC, source=source.uri)
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    start_sync(
        job_id,
        source.uri,
        COLLECTION,
        source=source,
        store=store,
        records=records,
        max_delete_share=0.5,
    )
    for _ in range(MAX_PASSES):
        rounds.run(job_id)
        ended = finish_sync(job_id, jobs=records.jobs, work=records.work, max_delete_share=0.5)
        if ended is not None:
            break
    job = records.jobs.get(job_id)
    assert job is not None
    return job


def test_a_sync_indexes_every_photo_of_the_source(
    records: JobRecords, source: LocalSource, store: VectorStore, rounds: Rounds
) -> None:
    job = sync(records, source, store, rounds)
    assert (job.state, job.done, job.collection) == (JobState.DONE, PHOTOS, COLLECTION)
    assert store.count(COLLECTION) == PHOTOS
    assert records.jobs.recall("source") == source.uri


def test_a_second_sync_of_an_unchanged_source_embeds_nothing(
    records: JobRecords, source: LocalSource, store: VectorStore, rounds: Rounds
) -> None:
    sync(records, source, store, rounds)
    again = sync(records, source, store, rounds)
    assert (again.state, again.done, again.unchanged) == (JobState.DONE, 0, PHOTOS)


def test_a_shard_held_back_is_planned_in_a_round_of_its_own(
    records: JobRecords,
    source: LocalSource,
    folder: Path,
    store: VectorStore,
    rounds: Rounds,
) -> None:
    """Two photos of six gone: within the job's budget (half of six), past the held-back
    share of a shard whose points are a third of that."""
    sync(records, source, store, rounds)
    for path in sorted(p for p in folder.rglob("*") if p.is_file())[:2]:
        path.unlink()
    rounds.settings = IndexerSettings(batch_size=4, shard_size=10, max_delete_share=0.3)
    job = sync(records, source, store, rounds)
    assert (job.state, job.round, job.deleted) == (JobState.DONE, 1, 2)
    assert store.count(COLLECTION) == PHOTOS - 2


def test_the_first_sync_makes_the_live_collection_once_at_the_newest_version(
    tmp_path: Path, store: VectorStore, redis: Redis
) -> None:
    repository = tmp_path / "models"
    repository.mkdir()
    for version in (1, 2):
        write_manifest(repository, MeanColours().manifest(version))
    store.drop_collection(COLLECTION)
    lock = alias_lock(redis, "unit-aliases")

    def make(job_id: str) -> str:
        return live_collection(
            job_id,
            store=store,
            lock=lock,
            model_version=None,
            repository=repository,
            manifest=MeanColours().manifest,
        )

    first = make("first")
    assert first == collection_name(2, "first")
    assert make("second") == first
    assert store.resolve(LIVE_ALIAS) == first
    assert {c.name: c for c in store.collections()}[first].dim == DIM


def test_an_increment_needs_a_feed_and_a_live_collection_of_labelled_points(
    store: VectorStore, records: JobRecords
) -> None:
    with pytest.raises(IndexerError, match="no change feed"):
        start_increment("j", "/photos", store=store, records=records, settings=IndexerSettings())
    with_feed = IndexerSettings(feed="file:///feed")
    with pytest.raises(IndexerError, match="nothing is indexed yet"):
        start_increment("j", "/photos", store=store, records=records, settings=with_feed)
    assert nightly_kind(store, None) == JobKind.SYNC
    assert nightly_kind(store, "file:///feed") == JobKind.SYNC  # no live collection yet
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    assert nightly_kind(store, "file:///feed") == JobKind.INCREMENT


def test_the_remembered_source_changes_only_when_a_sync_succeeds(
    tmp_path: Path,
    records: JobRecords,
    source: LocalSource,
    store: VectorStore,
    rounds: Rounds,
) -> None:
    """A sync of the wrong folder (one without the photos: `file:///etc` in the report) is
    refused by the delete guard and must not become the source the nightly job syncs."""
    assert sync(records, source, store, rounds).state == JobState.DONE
    assert records.jobs.recall("source") == source.uri
    wrong = tmp_path / "wrong"
    (wrong / "etc").mkdir(parents=True)
    (wrong / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    elsewhere = LocalSource(wrong)
    rounds.source = elsewhere
    refused = sync(records, elsewhere, store, rounds)
    assert refused.state == JobState.FAILED and refused.refused
    assert store.count(COLLECTION) == PHOTOS  # nothing stored was lost
    assert records.jobs.recall("source") == source.uri
    # The same folder once it holds the photos: a success, remembered.
    moved = tmp_path / "moved"
    source.root.rename(moved)
    renamed = LocalSource(moved)
    rounds.source = renamed
    assert sync(records, renamed, store, rounds).state == JobState.DONE
    assert records.jobs.recall("source") == renamed.uri
