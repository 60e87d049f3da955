"""One unit of a job's round, planned and committed: a shard (a sync's, a reindex's load, a
shard logged whole), a chunk of the change feed, a chunk of logged changes (a catch-up's), or
a shard of the grouping pass. The plan task (indexer/tasks.py) and the reindex benchmark both
take units this way."""

from __future__ import annotations

import time
from typing import Any

from core.jobs import JobStatus
from indexer import increment, planner, regroup
from indexer.planner import Planned, PlanParts
from indexer.runtime import Runtime
from indexer.shards import ShardRange


def unit_id_of(unit: dict[str, Any]) -> str:
    """The id the unit is committed under, once per round."""
    if unit["kind"] == "feed":
        return f"feed:{unit['seq']}"
    if unit["kind"] == "replay":
        return str(unit["id"])
    return ShardRange.from_wire(unit).id


def plan_unit(rt: Runtime, job: JobStatus, unit: dict[str, Any], worker: str) -> Planned:
    """What the unit needs done; DeletesRefused when its deletions pass the job's budget."""
    if unit["kind"] == "feed":
        return increment.plan_feed(rt, job, int(unit["seq"]), worker, plan_parts(rt, job))
    if unit["kind"] == "replay":  # logged changes of the live side (indexer/catchup.py)
        keys = [str(key) for key in unit["keys"]]
        return increment.plan_keys(
            job, unit_id_of(unit), keys, **plan_parts(rt, job), worker=worker, started=time.time()
        )
    shard = ShardRange.from_wire(unit)
    if unit["kind"] == "group":  # a shard of a reindex's grouping pass
        return regroup.group_shard(
            job,
            shard,
            store=rt.store,
            duplicate_threshold=rt.settings.indexer.duplicate_threshold,
            worker=worker,
            on_search=rt.metrics.duplicate_searches.labels("pass").inc,
        )
    return plan_shard(rt, job, shard, worker, bool(unit.get("confirm")))


def plan_shard(
    rt: Runtime, job: JobStatus, shard: ShardRange, worker: str, confirm: bool = False
) -> Planned:
    """planner.plan_shard with the worker's store, source, records and reader threads."""
    return planner.plan_shard(job, shard, **plan_parts(rt, job), worker=worker, confirm=confirm)


def plan_parts(rt: Runtime, job: JobStatus) -> PlanParts:
    """What a planner takes of the worker's Runtime for this job (its source opened)."""
    return PlanParts(
        source=rt.source(job.source),
        store=rt.store,
        records=rt.records,
        readers=rt.readers,
        settings=rt.settings.indexer,
    )


def commit(rt: Runtime, job_id: str, token: str, unit_id: str, planned: Planned) -> bool:
    """The unit's plan, once (indexer/workqueue.py); True when the round ended with it."""
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
