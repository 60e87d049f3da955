"""A full reindex beside the live collection, kept current while it runs, verified before an
atomic switch; a rollback that is current too.

Its phases: the load (round 0: every shard of the source into a new collection, whose search
index a Qdrant server defers; each batch grouped within itself), the index build, the grouping
pass (round 1: near-duplicate groups over the whole collection with the index,
indexer/jobs/regroup.py), then catch-up. From its start the new collection *follows* the live one
(indexer/queue/capture.py): every key the nightly jobs change is logged for it, and catch-up rounds
replay the log (indexer/jobs/catchup.py), at the cost of the changes, while the nightly jobs go on.
Once at most `switch_lag` changes wait, the new collection is compared with the live one
(indexer/jobs/verify.py) and its size with the delete guard's (indexer/plan/deleteguard.py), the
popular queries are embedded with the new model, and the reindex takes the live lock for the
drain alone: a last replay of what waits, and the aliases' move (indexer/jobs/switch.py). After
the switch the previous collection follows the live one for rollback_days, and a rollback
(indexer/jobs/rollback.py) replays its log before it is live again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from redis.lock import Lock

from core.collectionroles import job_of
from core.embedding.manifest import ModelManifest
from core.experiments import State as ExperimentState
from core.jobs import LIVE_LOCK
from core.jobstatus import FINISHED, JobKind, JobPhase, JobState, JobStatus
from core.settings import QdrantSettings
from core.settings_indexer import IndexerSettings
from core.sources import Source
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    CollectionNotFound,
    VectorStore,
    collection_name,
    model_version_of,
)
from indexer.jobs.catchup import end_replay, record_lag, start_replay
from indexer.jobs.preflight import check_reindex
from indexer.jobs.quality_gate import Verdict
from indexer.jobs.regroup import group_units
from indexer.jobs.switch import switch
from indexer.jobs.sync import IndexerError, start_round
from indexer.jobs.verify import check, refusal
from indexer.plan.deleteguard import refuse, switch_guard
from indexer.plan.shards import ShardMap, load_map
from indexer.queue.records import JobRecords

# Round 0 is the load; the grouping pass is round 1, the catch-up rounds follow.
GROUPING_ROUND = 1
HELD = (
    "held for an experiment of its collection against the live one: replaying the live "
    "side's changes meanwhile; it switches once `photosearch experiment end --decision "
    "switch` (and the quality gate) say so, or is dropped on `--decision drop`"
)
COUNT_AGAIN = (
    "verified, but the new collection holds fewer photos than the delete guard allows while "
    "changes still wait: replaying them before counting again"
)


def replay(
    job_id: str,
    round_: int,
    collection: str,
    *,
    store: VectorStore,
    records: JobRecords,
    settings: IndexerSettings,
) -> int:
    """catchup.start_replay in chunks of the feed's."""
    return start_replay(
        job_id, round_, collection, store=store, records=records, chunk=settings.feed_chunk
    )


def repair(job: JobStatus, keys: list[str], *, store: VectorStore, records: JobRecords) -> None:
    """Differences the source explains (indexer/jobs/verify.py) logged as changes of the live
    side: the next catch-up round replays them into the new collection, and the live one,
    which missed them too, replays them once it follows the new one (indexer/jobs/switch.py)."""
    records.capture.capture_mapped(load_map(store, store.resolve(LIVE_ALIAS)), keys)
    records.listings.repaired(job.id, keys)
    records.jobs.add(job.id, repaired=len(keys), repair_rounds=1)
    records.jobs.update(
        job.id,
        message=f"repairing {len(keys)} differences the source explains (changed after its "
        f"listing, unannounced): replaying them, then verifying again",
    )


def loading(job: JobStatus) -> bool:
    """A reindex's load: its collection has no search index to find near-duplicates with
    yet, so each batch is grouped within itself, and the grouping pass does the rest."""
    return job.kind == JobKind.REINDEX and job.phase == JobPhase.LOAD


def start_reindex(
    job_id: str,
    model_version: int,
    source_uri: str,
    *,
    ready: Callable[[int], bool],
    manifest: Callable[[int], ModelManifest],
    store: VectorStore,
    records: JobRecords,
    qdrant: QdrantSettings,
) -> None:
    """Create the new collection, follow the live one's changes, open the load round over
    the live collection's shards; `ready(version)`: whether Triton serves the model version."""
    if not ready(model_version):
        raise IndexerError(
            f"model version {model_version} is not loaded in Triton: export it, then run "
            "`photosearch triton load` (or restart Triton) before reindexing"
        )
    dim = manifest(model_version).embedding_dim
    collection = collection_name(model_version, job_id)
    # Before anything is written: a reindex the store cannot hold would fail hours into its
    # load, or take the live collection down with it. Refused with the figures (IndexerError).
    records.jobs.note_problems(job_id, check_reindex(store, collection, dim, qdrant))
    open_load(job_id, collection, dim, source_uri, store=store, records=records)


def open_load(
    job_id: str,
    collection: str,
    dim: int,
    source_uri: str,
    *,
    store: VectorStore,
    records: JobRecords,
) -> None:
    """The new collection, following the live one from now, and the load's round over the
    live collection's shards."""
    store.create_collection(collection, dim, bulk=True)
    # Before the first shard is listed: a change the listing misses is logged.
    records.capture.follow(collection)
    records.jobs.start(
        job_id,
        state=JobState.RUNNING,
        phase=JobPhase.LOAD,
        source=source_uri,
        collection=collection,
        model_version=model_version_of(collection),
    )
    try:
        shards = load_map(store, store.resolve(LIVE_ALIAS))
    except CollectionNotFound:
        shards = ShardMap()  # one shard of everything, split as it is listed
    start_round(records.work, job_id, 0, shards)


def advance(
    job_id: str,
    *,
    store: VectorStore,
    records: JobRecords,
    lock: Lock,
    settings: IndexerSettings,
    now: Callable[[], float] = time.time,
    source: Callable[[str], Source],
    warm: Callable[[str, int], int],
    gate: Callable[[JobStatus], Verdict],
    experiment: Callable[[str], ExperimentState | None],
) -> None:
    """The next step of a reindex whose round ended, or which waits; nothing while its round
    runs. Run again and again (the workers' nudges), it does each step once. `source(uri)`
    opens the job's source; `warm(job_id, version)` pre-warms the query cache (`warm_cache`)
    and says how many queries it warmed; `gate(job)` is the quality gate's verdict on the
    job's collection (indexer/jobs/quality_gate.py `judge`); `experiment(collection)` what an
    interleaved experiment of the collection says (core/experiments.py `decision_for`)."""
    jobs, work = records.jobs, records.work
    job = jobs.get(job_id)
    if job is None or job.state in (*FINISHED, JobState.PAUSED):
        return
    ended = work.round_done(job_id, job.round)
    if job.phase == JobPhase.LOAD:
        if not ended:
            record_lag(records, job_id, job.collection)
            return
        store.finish_bulk_load(job.collection)
        jobs.update(job_id, phase=JobPhase.INDEXING, state=JobState.FINALIZING)
        job.phase = JobPhase.INDEXING
    if job.phase == JobPhase.INDEXING:
        # Waits end at a later nudge.
        if not store.index_ready(job.collection):
            jobs.update(job_id, message="building the search index of the new collection")
            return
        # The round first: a step that dies between the two is taken again, the round's
        # start being once only.
        shards = load_map(store, job.collection)
        work.start_round(job_id, GROUPING_ROUND, group_units(shards))
        jobs.update(
            job_id, phase=JobPhase.GROUPING, message="grouping near-duplicates, shard by shard"
        )
        return

    def replay_next(round_: int) -> None:
        replay(job_id, round_, job.collection, store=store, records=records, settings=settings)

    if job.phase == JobPhase.GROUPING:
        if not work.round_done(job_id, GROUPING_ROUND):
            return
        replay_next(GROUPING_ROUND + 1)
        jobs.update(job_id, phase=JobPhase.CATCH_UP, message="replaying the changes since the load")
        return
    if not ended:
        record_lag(records, job_id, job.collection)
        return
    lag = end_replay(records, job_id, job.collection, job.capture_cut)
    if job.phase == JobPhase.SWITCH:
        switch(
            job_id,
            store=store,
            records=records,
            lock=lock,
            rollback_days=settings.rollback_days,
            now=now,
        )
        return
    # Catch-up: replay again until little waits, then check, warm, and take the live lock.
    # While an experiment compares the collection with the live one, it waits here, kept
    # current; it is verified and gated once the experiment ended with "switch".
    decision = experiment(job.collection)
    if decision == "drop":
        drop_for_experiment(job, store=store, records=records, lock=lock)
        return
    held = decision == "running"
    if held:
        jobs.update(job_id, message=HELD)
    if lag.waiting > (0 if held else settings.switch_lag):
        replay_next(job.round + 1)
        return
    if held:
        return
    if job.capture_cut != job.verified_cut:
        found = check(
            job,
            store=store,
            source=source(job.source),
            records=records,
            samples=settings.verify_samples,
        )
        if found.explained and not found.problems and job.repair_rounds < settings.verify_repairs:
            repair(job, found.explained, store=store, records=records)
            replay_next(job.round + 1)
            return
        problems = found.problems or [
            f"{key} still differs after {job.repair_rounds} rounds of repair"
            for key in found.explained
        ]
        if problems:
            jobs.finish(job_id, JobState.FAILED, refusal(job.collection, problems))
            records.listings.forget(job_id, jobs.ttl_s)
            return
        # What the switch would drop, counted here, not under the lock (an exact count of
        # each collection costs their size). The changes still waiting are replayed first
        # where they could make up what the new collection lacks.
        guard = switch_guard(store, jobs, job, settings.max_delete_share, waiting=lag.waiting)
        if guard.replay:
            jobs.update(job_id, message=COUNT_AGAIN)
            replay_next(job.round + 1)
            return
        if guard.refusal is not None:
            refuse(jobs, work, job_id, guard.refusal)
            return
        verdict = gate(job)
        jobs.update(job_id, quality=verdict.to_json())
        if verdict.refusal is not None:
            refuse(jobs, work, job_id, verdict.refusal)
            return
        warmed = warm(job_id, model_version_of(job.collection))
        jobs.update(job_id, verified_cut=job.capture_cut, warmed=warmed)
    holder = jobs.claim_lock(LIVE_LOCK, job_id)
    if holder is not None:
        jobs.update(job_id, message=f"verified; waiting for job {holder} on the live collection")
        if lag.waiting:  # keep the lag small while it waits
            replay_next(job.round + 1)
        return
    jobs.update(job_id, phase=JobPhase.SWITCH, locked_at=now(), message="draining the last changes")
    replay_next(job.round + 1)


def resume(
    job_id: str,
    *,
    records: JobRecords,
    running: Collection[str] = (),
    before: float | None = None,
) -> bool:
    """Set a stopped reindex going from its checkpoints: the shards planned and batches
    embedded stay done; what its tasks held goes back in line, but what `running` tasks (live
    workers') hold, or tasks that claimed at or after `before`. False when it never began its
    load (the caller starts it again)."""
    jobs = records.jobs
    job = jobs.get(job_id)
    if job is None or job.kind != JobKind.REINDEX:
        raise IndexerError(f"no reindex job {job_id}")
    if job.state == JobState.DONE:
        raise IndexerError(f"reindex job {job_id} has switched already")
    if job.phase == JobPhase.NONE:
        jobs.update(job_id, state=JobState.QUEUED, finished_at=0)
        return False
    records.capture.follow(job.collection)  # logging again, if it stopped
    records.work.requeue(job_id, running=running, before=before)
    fields: dict[str, object] = {"finished_at": 0, "message": f"resumed in its {job.phase}"}
    if job.phase == JobPhase.SWITCH:  # the live lock went with its end: verify and take it again
        fields |= {"phase": JobPhase.CATCH_UP, "verified_cut": 0}
    state = JobState.RUNNING if job.phase == JobPhase.LOAD else JobState.FINALIZING
    jobs.update(job_id, state=state, **fields)
    return True


def drop(collection: str, *, store: VectorStore, records: JobRecords, lock: Lock) -> str:
    """Delete a collection for good (under the alias `lock`); never the live one."""
    with lock:
        aliases = store.aliases()
        if aliases.get(LIVE_ALIAS) == collection:
            raise IndexerError(f"{collection} is live; switch or roll back first")
        if not store.has_collection(collection):
            raise IndexerError(f"no collection {collection}")
        if aliases.get(PREVIOUS_ALIAS) == collection:
            store.set_aliases({PREVIOUS_ALIAS: None})
        store.drop_collection(collection)
    records.capture.unfollow(collection)
    records.skips.drop(collection)
    job = job_of(collection, records.jobs.get)
    if job is not None:  # a failed reindex's holds no room now, and resumes no more
        records.jobs.update(job.id, dropped=1)
        records.listings.forget(job.id)
    return f"dropped {collection}"


def drop_for_experiment(
    job: JobStatus, *, store: VectorStore, records: JobRecords, lock: Lock
) -> None:
    """An experiment ended with "drop": the reindex is cancelled and its collection dropped
    (its work with it). Run again after a crash between the two, it finds nothing to drop."""
    if store.has_collection(job.collection):
        drop(job.collection, store=store, records=records, lock=lock)
    records.jobs.update(job.id, dropped=1)
    records.jobs.finish(
        job.id,
        JobState.CANCELLED,
        f"dropped: the experiment of {job.collection} against the live collection ended with "
        f"the decision to drop it",
    )
    records.work.drop(job.id, records.jobs.ttl_s)
