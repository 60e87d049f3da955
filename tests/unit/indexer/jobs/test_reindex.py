"""A reindex's and a rollback's steps on the in-process store and the session's Redis: a
reindex from its load to its switch, step by step, a resume, the switch of the aliases (once,
however often the step runs), the previous collection following the live one for
rollback_days by the test's clock, a rollback's replay and swap, what may be dropped, and the
cache warmed for the new model version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from redis import Redis

from core.embedding.arrays import Embeddings
from core.embedding.errors import TritonUnavailable
from core.experiments import State
from core.jobs import LIVE_LOCK
from core.jobstatus import JobKind, JobPhase, JobState, JobStatus
from core.querycache import cache_key, popular_key
from core.settings_api import ApiSettings
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, collection_name
from indexer.jobs.quality_gate import NOT_CONFIGURED, Verdict
from indexer.jobs.reindex import (
    COUNT_AGAIN,
    GROUPING_ROUND,
    HELD,
    advance,
    drop,
    open_load,
    resume,
)
from indexer.jobs.rollback import advance_rollback, stale, start_rollback
from indexer.jobs.switch import switch, warm_cache
from indexer.jobs.sync import IndexerError, alias_lock
from indexer.jobs.verify import check
from indexer.photo.writer import ShardPhoto
from indexer.plan.catalog import read_catalog
from indexer.plan.shards import ShardRange
from indexer.queue.records import JobRecords
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

    # The load listed every photo (the planner's record, indexer/queue/listings.py).
    listed = {photo.key: photo.version for photo, _ in photos}
    records.listings.record(reindexed, ShardRange(""), listed, at=0.0)

    def problems() -> list[str]:
        return check(job, store=store, source=source, records=records, samples=PHOTOS).problems

    assert problems() == []
    store.delete(NEW, [photos[0][0].photo_id])
    assert problems() != []


class Clock:
    """The test's clock: it moves when the test says."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def end_round(records: JobRecords, job_id: str) -> None:
    """Every unit of the job's round committed as planned with nothing to embed, as the plan
    tasks would commit a round of a collection that holds no photos."""
    work = records.work
    tokens = work.reserve(job_id, max_embed=0, max_plan=1000, plan_ahead=1, ttl_s=60, lease_s=60)
    ended = tokens.round_ended
    for token in tokens.plan:
        unit = work.claim_unit(job_id, token)
        ended = (
            work.commit(job_id, token, unit.id, {})
            if unit is not None
            else work.release(job_id, token)
        ) or ended
    assert ended


def test_a_reindex_steps_from_its_load_to_the_switch_by_the_tests_clock(
    source: LocalSource, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    """Each round ends as its tasks would end it, with nothing to embed: the steps between
    them are advance's, each run twice where a nudge could run it again."""
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    job_id = records.jobs.create(JobKind.REINDEX, source=source.uri)
    open_load(job_id, NEW, DIM, source.uri, store=store, records=records)
    assert records.capture.followers() == {NEW: 0.0}
    clock = Clock(1000.0)
    warmed: list[tuple[str, int]] = []

    def warm(job: str, version: int) -> int:
        warmed.append((job, version))
        return 5

    def step() -> JobStatus:
        advance(
            job_id,
            store=store,
            records=records,
            lock=alias_lock(redis, records.jobs.prefix),
            settings=IndexerSettings(switch_lag=0, rollback_days=7),
            now=clock,
            source=lambda uri: source,
            warm=warm,
            gate=lambda job: Verdict({"status": "unconfigured", "message": NOT_CONFIGURED}),
            experiment=lambda collection: None,
        )
        job = records.jobs.get(job_id)
        assert job is not None
        return job

    assert step().phase == JobPhase.LOAD  # its round runs
    end_round(records, job_id)
    assert (step().phase, step().round) == (
        JobPhase.GROUPING,
        GROUPING_ROUND,
    )  # Edge's index is ready
    end_round(records, job_id)
    assert (step().phase, step().round) == (JobPhase.CATCH_UP, GROUPING_ROUND + 1)
    end_round(records, job_id)
    job = step()
    assert (job.phase, job.locked_at, job.warmed) == (JobPhase.SWITCH, 1000.0, 5)
    assert warmed == [(job_id, 2)]
    assert records.jobs.claim_lock(LIVE_LOCK, "another") == job_id
    end_round(records, job_id)
    clock.at = 1001.5
    job = step()
    assert (job.state, job.lock_s) == (JobState.DONE, 1.5)
    assert store.aliases() == {LIVE_ALIAS: NEW, PREVIOUS_ALIAS: COLLECTION}
    assert records.capture.followers() == {COLLECTION: 1001.5 + 7 * DAY}
    assert warmed == [(job_id, 2)]  # warmed once
    assert job.message.endswith(f"; {NOT_CONFIGURED}")  # the gate said it had no set
    assert job.to_dict()["quality"] == {"status": "unconfigured", "message": NOT_CONFIGURED}


def test_a_stopped_reindex_resumes_in_its_phase_and_verifies_again_after_the_live_lock(
    source: LocalSource, store: VectorStore, records: JobRecords
) -> None:
    never = records.jobs.create(JobKind.REINDEX, source=source.uri)
    assert resume(never, records=records) is False  # its start again
    queued = records.jobs.get(never)
    assert queued is not None and queued.state == JobState.QUEUED

    job_id = records.jobs.create(JobKind.REINDEX, source=source.uri)
    open_load(job_id, NEW, DIM, source.uri, store=store, records=records)
    records.jobs.update(job_id, phase=JobPhase.SWITCH, verified_cut=7, state=JobState.CANCELLED)
    records.capture.unfollow(NEW)
    assert resume(job_id, records=records) is True
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.state, job.phase, job.verified_cut) == (JobState.FINALIZING, JobPhase.CATCH_UP, 0)
    assert records.capture.followers() == {NEW: 0.0}  # logging again
    with pytest.raises(IndexerError, match="no reindex job"):
        resume("nobody", records=records)


def test_a_rollback_replays_under_the_live_lock_then_swaps_and_a_stale_one_is_refused(
    store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    store.create_collection(NEW, DIM)
    store.set_aliases({LIVE_ALIAS: NEW, PREVIOUS_ALIAS: COLLECTION})
    records.capture.follow(COLLECTION, until=10 * DAY)
    lock = alias_lock(redis, records.jobs.prefix)
    settings = IndexerSettings(rollback_days=7)
    late = records.jobs.create(JobKind.ROLLBACK)
    with pytest.raises(IndexerError, match=r"rollback refused: .* stopped receiving changes"):
        start_rollback(late, store=store, records=records, settings=settings, now=Clock(11 * DAY))

    now = Clock(9 * DAY)
    sync = records.jobs.create(JobKind.SYNC)
    records.jobs.start(sync, state=JobState.RUNNING)
    assert records.jobs.claim_lock(LIVE_LOCK, sync) is None
    job_id = records.jobs.create(JobKind.ROLLBACK)
    start_rollback(job_id, store=store, records=records, settings=settings, now=now)
    job = records.jobs.get(job_id)
    assert job is not None and f"waiting for job {sync} on the live collection" in job.message
    records.jobs.release_lock(LIVE_LOCK, sync)

    # The lock taken, the log's replay opened.
    advance_rollback(job_id, store=store, records=records, lock=lock, settings=settings, now=now)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.phase, job.collection, job.locked_at) == (JobPhase.REPLAY, COLLECTION, 9 * DAY)
    end_round(records, job_id)
    advance_rollback(job_id, store=store, records=records, lock=lock, settings=settings, now=now)
    job = records.jobs.get(job_id)
    assert job is not None and job.state == JobState.DONE
    assert job.message == (
        f"{LIVE_ALIAS} -> {COLLECTION} (model version 1); {PREVIOUS_ALIAS} -> {NEW}"
    )
    assert store.aliases() == {LIVE_ALIAS: COLLECTION, PREVIOUS_ALIAS: NEW}
    assert records.capture.followers() == {NEW: 9 * DAY + 7 * DAY}


class Catchup:
    """A reindex into NEW brought to its catch-up (its load and grouping rounds ended as
    end_round ends them), stepped with an experiment's decision and a gate the test sets;
    the gate's calls are recorded."""

    def __init__(
        self, source: LocalSource, store: VectorStore, records: JobRecords, redis: Redis
    ) -> None:
        self.source, self.store, self.records, self.redis = source, store, records, redis
        self.decision: State | None = None
        self.verdict = Verdict({"status": "passed", "message": "quality gate passed"})
        self.gated: list[str] = []
        self.switch_lag = 0
        store.set_aliases({LIVE_ALIAS: COLLECTION})
        self.job_id = records.jobs.create(JobKind.REINDEX, source=source.uri)
        open_load(self.job_id, NEW, DIM, source.uri, store=store, records=records)
        for _ in range(3):  # the load, the grouping pass, the first replay
            self.step()
            end_round(records, self.job_id)

    def gate(self, job: JobStatus) -> Verdict:
        self.gated.append(job.collection)
        return self.verdict

    def step(self) -> JobStatus:
        advance(
            self.job_id,
            store=self.store,
            records=self.records,
            lock=alias_lock(self.redis, self.records.jobs.prefix),
            settings=IndexerSettings(switch_lag=self.switch_lag),
            source=lambda uri: self.source,
            warm=lambda job, version: 0,
            gate=self.gate,
            experiment=lambda collection: self.decision,
        )
        job = self.records.jobs.get(self.job_id)
        assert job is not None
        return job


def test_a_reindex_held_by_an_experiment_stays_current_and_switches_when_told(
    source: LocalSource, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    reindex = Catchup(source, store, records, redis)
    reindex.decision = "running"
    job = reindex.step()
    assert (job.phase, job.message) == (JobPhase.CATCH_UP, HELD)
    assert records.jobs.lock_holder(LIVE_LOCK) is None and reindex.gated == []
    # A change of the live side while it is held is replayed at once (switch_lag aside).
    records.capture.capture(ShardRange(""), ["day1/photo001.png"])
    job = reindex.step()
    assert (job.phase, job.round, job.replayed) == (JobPhase.CATCH_UP, GROUPING_ROUND + 2, 1)
    end_round(records, reindex.job_id)
    assert reindex.step().message == HELD

    reindex.decision = "switch"
    job = reindex.step()
    assert (job.phase, reindex.gated) == (JobPhase.SWITCH, [NEW])  # verified and gated once
    assert records.jobs.lock_holder(LIVE_LOCK) == reindex.job_id


def test_a_reindex_whose_experiment_ended_with_drop_is_cancelled_and_dropped(
    source: LocalSource, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    reindex = Catchup(source, store, records, redis)
    reindex.decision = "drop"
    job = reindex.step()
    assert (job.state, job.dropped) == (JobState.CANCELLED, True)
    assert "ended with the decision to drop it" in job.message
    assert not store.has_collection(NEW) and NEW not in records.capture.followers()
    assert reindex.gated == [] and store.aliases() == {LIVE_ALIAS: COLLECTION}


def test_a_reindex_the_quality_gate_refuses_fails_refused_with_the_figures(
    source: LocalSource, store: VectorStore, records: JobRecords, redis: Redis
) -> None:
    reindex = Catchup(source, store, records, redis)
    figures = {"status": "refused", "message": "refused by the quality gate: on shapes"}
    reindex.verdict = Verdict(figures, "refused by the quality gate: on shapes ...")
    job = reindex.step()
    assert (job.state, job.refused, job.message) == (
        JobState.FAILED,
        True,
        "refused by the quality gate: on shapes ...",
    )
    assert job.to_dict()["quality"] == figures
    assert records.jobs.lock_holder(LIVE_LOCK) is None
    assert store.aliases() == {LIVE_ALIAS: COLLECTION}


@pytest.fixture
def behind(
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    redis: Redis,
    embed_batch: EmbedBatch,
) -> tuple[Catchup, list[ShardPhoto]]:
    """A reindex in its catch-up (switch_lag 10) whose new collection holds 1 of the 6 photos
    the live one holds, and the photos."""
    reindex = Catchup(source, store, records, redis)
    reindex.switch_lag = 10
    photos = [(photo, "") for photo in read_catalog(source, ()).photos.values()]
    embed_batch(photos, COLLECTION)
    embed_batch(photos[:1], NEW, model_version=2)
    return reindex, photos


def test_a_shortfall_the_waiting_changes_could_make_up_is_replayed_then_counted_again(
    behind: tuple[Catchup, list[ShardPhoto]],
    records: JobRecords,
    embed_batch: EmbedBatch,
) -> None:
    """The nightly side added photos faster than the reindex replayed them: 5 changes wait
    (within switch_lag). 6 - 1 is past the share (3 of 6), but the changes could add the 5:
    they are replayed first; counted again once they are in, it switches."""
    reindex, photos = behind
    records.capture.capture(ShardRange(""), [photo.key for photo, _ in photos[1:]])

    job = reindex.step()
    assert (job.state, job.phase, job.round, job.message) == (
        JobState.FINALIZING,
        "catch-up",
        GROUPING_ROUND + 2,
        COUNT_AGAIN,
    )
    assert (job.live_count, job.delete_budget, job.refused) == (6, 3, False)
    assert records.jobs.lock_holder(LIVE_LOCK) is None and reindex.gated == []

    embed_batch(photos[1:], NEW, model_version=2)  # what the replay's tasks write
    end_round(records, reindex.job_id)
    job = reindex.step()
    assert (job.phase, job.refused, reindex.gated) == (JobPhase.SWITCH, False, [NEW])


def test_a_shortfall_past_what_waits_is_refused_at_once(
    behind: tuple[Catchup, list[ShardPhoto]],
    folder: Path,
    store: VectorStore,
    records: JobRecords,
) -> None:
    """The source lost 5 of its 6 photos, and 1 change waits. It could not make up the 2 past
    the share (6 - 1 - 3): the switch is refused before the gate, nothing replayed."""
    reindex, photos = behind
    for photo, _ in photos[1:]:
        (folder / photo.key).unlink()
    records.capture.capture(ShardRange(""), [photos[0][0].key])

    job = reindex.step()
    assert (job.state, job.refused, job.round) == (JobState.FAILED, True, GROUPING_ROUND + 1)
    assert "holds 1 photos, fewer than (1 - max_delete_share=0.5) x the 6" in job.message
    assert reindex.gated == [] and store.aliases() == {LIVE_ALIAS: COLLECTION}
