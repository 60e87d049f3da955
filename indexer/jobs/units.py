"""One unit of a job's round, planned and committed: a shard (a sync's, a reindex's load, a
shard logged whole), a chunk of the change feed, a chunk of logged changes (a catch-up's), or
a shard of the grouping pass. The plan task (indexer/tasks.py) and the reindex benchmark both
take units this way, and a reindex's steps what they use of the worker's Runtime: this is
where the Runtime is taken apart, each step being given its parts by name."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import assert_never

from core.embedding.arrays import Embeddings
from core.experiments import decision_for
from core.jobstatus import JobStatus
from core.sources import Source
from indexer.jobs import quality_gate, regroup, reindex, switch
from indexer.jobs.quality_gate import Verdict
from indexer.jobs.sync import alias_lock
from indexer.plan import increment, planner
from indexer.plan.feed import Feed, open_feed
from indexer.plan.planner import Planned
from indexer.plan.shards import ShardRange
from indexer.queue.messages import FeedUnit, GroupUnit, ReplayUnit, ShardUnit, Unit
from indexer.runtime import Runtime


def plan_unit(rt: Runtime, job: JobStatus, unit: Unit, worker: str) -> Planned:
    """What the unit needs done; DeletesRefused when its deletions pass the job's budget."""
    match unit:
        case FeedUnit(seq=seq):
            source = rt.source(job.source)
            return increment.plan_feed(
                job,
                seq,
                job_feed(rt, source),
                source=source,
                store=rt.store,
                records=rt.records,
                readers=rt.readers,
                settings=rt.settings.indexer,
                worker=worker,
                taggers=rt.taggers,
            )
        case ReplayUnit(id=unit_id, keys=keys):  # logged changes (indexer/jobs/catchup.py)
            return increment.plan_keys(
                job,
                unit_id,
                list(keys),
                source=rt.source(job.source),
                store=rt.store,
                records=rt.records,
                readers=rt.readers,
                settings=rt.settings.indexer,
                worker=worker,
                started=time.time(),
                taggers=rt.taggers,
            )
        case GroupUnit(shard=shard):  # a shard of a reindex's grouping pass
            return regroup.group_shard(
                job,
                shard,
                store=rt.store,
                duplicate_threshold=rt.duplicate_threshold(job.model_version),
                worker=worker,
                on_search=rt.metrics.duplicate_searches.labels("pass").inc,
            )
        case ShardUnit(shard=shard, confirm=confirm):
            return plan_shard(rt, job, shard, worker, confirm)
        case _:
            assert_never(unit)


def plan_shard(
    rt: Runtime, job: JobStatus, shard: ShardRange, worker: str, confirm: bool = False
) -> Planned:
    """planner.plan_shard with the worker's store, source, records, reader threads, settings
    and automatic taggers."""
    return planner.plan_shard(
        job,
        shard,
        source=rt.source(job.source),
        store=rt.store,
        records=rt.records,
        readers=rt.readers,
        settings=rt.settings.indexer,
        worker=worker,
        taggers=rt.taggers,
        confirm=confirm,
    )


def job_feed(rt: Runtime, source: Source) -> Feed:
    """The change feed of the worker's settings over the job's source."""
    settings = rt.settings
    return open_feed(
        settings.indexer.feed or "",
        source,
        settings.s3,
        rt.redis,
        settings.redis.prefix,
        hold_s=settings.indexer.visibility_timeout_s,
        read_s=settings.indexer.feed_read_s,
    )


def query_embeddings(rt: Runtime) -> Callable[[Sequence[str], int], Embeddings]:
    """Texts embedded at a model version by Triton, from a task thread."""

    def embed(texts: Sequence[str], version: int) -> Embeddings:
        return rt.run(rt.embedder.encode_texts(texts, model_version=version, timeout_s=120))

    return embed


def warmer(rt: Runtime) -> Callable[[str, int], int]:
    """switch.warm_cache with the worker's cache Redis, Triton and API settings."""
    return partial(
        switch.warm_cache,
        redis=rt.cache_redis,
        prefix=rt.settings.redis.prefix,
        jobs=rt.jobs,
        embed=query_embeddings(rt),
        api=rt.settings.api,
    )


def gate(rt: Runtime) -> Callable[[JobStatus], Verdict]:
    """quality_gate.judge with the worker's store, Triton, each version's calibration (its
    manifest's), the indexer's settings and, if they ask, the search log's clicks (in
    PhotoSearch's Redis)."""
    settings = rt.settings.indexer
    clicks = partial(
        quality_gate.click_judgements,
        rt.redis,
        rt.settings.redis.prefix,
        retention_s=rt.settings.api.feedback_retention_days * 86400,
    )
    return partial(
        quality_gate.judge,
        store=rt.store,
        paths=settings.judgements,
        embed=query_embeddings(rt),
        mode=settings.quality_mode,
        max_drop=settings.max_quality_drop,
        clicks=clicks if settings.click_judgements else None,
        calibration=lambda version: rt.embedder.manifest(version).calibration,
    )


def advance(rt: Runtime, job_id: str) -> None:
    """reindex.advance with the worker's store, records, alias lock, settings and sources, the
    query cache's pre-warm, the quality gate and the experiments' decisions (in PhotoSearch's
    Redis)."""
    reindex.advance(
        job_id,
        store=rt.store,
        records=rt.records,
        lock=alias_lock(rt.redis, rt.settings.redis.prefix, lease_s=rt.settings.indexer.lease_s),
        settings=rt.settings.indexer,
        source=rt.source,
        warm=warmer(rt),
        gate=gate(rt),
        experiment=partial(decision_for, rt.redis, rt.settings.redis.prefix),
    )


def commit(rt: Runtime, job_id: str, token: str, unit_id: str, planned: Planned) -> bool:
    """The unit's plan, once (indexer/queue/workqueue.py); True when the round ended with it."""
    return rt.work.commit(
        job_id,
        token,
        unit_id,
        planned.record,
        batches=planned.batches,
        units=planned.units,
        counts=planned.counts,
        marks=planned.marks,
    )
