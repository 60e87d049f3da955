"""The delete guard: a sync or increment deletes at most a share of the live index unless forced.

A sync of the wrong folder (an unmounted disk, an empty bucket prefix) lists nothing of what is
indexed, and would delete it all. So a job that changes the live collection opens with a
budget: `max_delete_share` x the points the live collection holds when the job starts. Every
planning unit (a shard, a feed chunk) reserves its deletions against the budget, in one Redis
script, before it deletes anything; the reservation that would pass the budget refuses the job,
and the script refuses every later one too: whatever runs in parallel, nothing past the share
is deleted. A reservation is kept per unit and only grows, so a unit planned again (a retry, a
crash) is not counted twice and cannot shrink what it already deleted.

A budget alone would still let the catastrophic sync delete the share before it stops: each
shard of an empty listing loses all of its points. So a shard whose listing would delete more
than the share of its own points is held back: it reserves its deletions but writes nothing
(no deletion, no embedding), and once the whole listing has been seen within the budget it is
planned again in a last round, deleting then. A listing of nothing holds every shard back and
runs out of budget before any is planned again: nothing at all is deleted. An increment
deletes only what its feed reported gone, a chunk at a time against the same budget; a chunk
refused is not committed, so its events stay in the feed.

What this holds is counters (the budget, and one reservation per unit that deleted), never a
listing: at 1e8 photos it costs what it costs at 1e3. A reindex deletes nothing live: its
switch is refused instead when the new collection would hold fewer than (1 - share) x the
live one's points. Counted before the last changes are replayed, so a shortfall the changes
still waiting could make up (each may add a photo the new collection lacks) is no refusal yet:
they are replayed first and the collections counted again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore
from indexer.queue.workqueue import WorkQueue

# ARGV: unit id, deletions it asks for. Returns {1 granted or 0 refused, deletions asked in all}.
_RESERVE = """
local state = redis.call('HGET', KEYS[1], 'state')
local total = tonumber(redis.call('HGET', KEYS[1], 'delete_reserved') or '0')
if state == 'done' or state == 'failed' or state == 'cancelled' then return {0, total} end
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local n = tonumber(ARGV[2])
if n <= old then return {1, total} end
local after = total - old + n
-- A job without a budget (started before the guard) may delete nothing: fail closed.
if after > tonumber(redis.call('HGET', KEYS[1], 'delete_budget') or '0') then
  return {0, after}
end
redis.call('HSET', KEYS[2], ARGV[1], n)
redis.call('HSET', KEYS[1], 'delete_reserved', after)
return {1, after}
"""


class DeletesRefused(Exception):
    """A job would delete more than its share of the live index; the message says what to do."""


def allowed(points: int, share: float) -> int:
    """The most deletions out of `points` within the share (the epsilon: 0.29 x 100 is 29)."""
    return math.floor(share * points + 1e-9)


def guarded(job: JobStatus) -> bool:
    """Whether the job's deletions are counted: a sync or increment of the live collection,
    unless forced. A reindex writes to its own new collection; its switch is checked."""
    return job.kind in (JobKind.SYNC, JobKind.INCREMENT) and not job.force


def open_budget(jobs: Jobs, job_id: str, live: int, share: float) -> None:
    """Record the live collection's size (`live` points) and the job's budget, once: a start
    run again after a crash keeps the first ones, counted before anything was deleted."""
    key = f"{jobs.prefix}:job:{job_id}"
    with jobs.redis.pipeline() as pipe:
        pipe.hsetnx(key, "live_count", live)
        pipe.hsetnx(key, "delete_budget", allowed(live, share))
        pipe.execute()


def reserve(jobs: Jobs, share: float, job: JobStatus, unit_id: str, deletions: int) -> None:
    """Count a unit's deletions against the job's budget (`share` of the live index) before
    they are made; raise DeletesRefused, deleting nothing, when they would pass it."""
    if not deletions or not guarded(job):
        return
    script = jobs.redis.register_script(_RESERVE)
    keys = [f"{jobs.prefix}:job:{job.id}", f"{jobs.prefix}:job:{job.id}:deletes"]
    granted, asked = script(keys=keys, args=[unit_id, deletions])
    if granted:
        jobs.redis.expire(keys[1], jobs.ttl_s)
        return
    now = jobs.get(job.id) or job
    raise DeletesRefused(
        f"refused: this {job.kind} would delete more than max_delete_share="
        f"{share:g} of the live index ({now.live_count} photos, "
        f"at most {now.delete_budget} deletions; {int(asked)} asked so far). Nothing past the "
        f"share was deleted ({now.deleted} deleted, {now.held} held back). Check the source "
        f"{job.source}: a wrong folder, an unmounted disk or an empty prefix lists nothing of "
        f"what is indexed. If the deletions are right, run it again forced: "
        f"`photosearch index {job.kind} --force`, or `force: true` in POST /v1/admin/sync."
    )


def holds_back(gone: int, points: int, share: float) -> bool:
    """A shard whose listing would delete more than the share of its own points."""
    return gone > allowed(points, share)


@dataclass(frozen=True)
class SwitchGuard:
    """The guard's word on a reindex's switch: `refusal` says why not; `replay` that the
    changes still waiting could make up the shortfall (replay them, then count again);
    neither, that it may switch."""

    refusal: str | None = None
    replay: bool = False


def switch_guard(
    store: VectorStore, jobs: Jobs, job: JobStatus, share: float, waiting: int
) -> SwitchGuard:
    """Whether a reindex may switch: not when its collection holds too few of the live one's
    points. `waiting`: the changes not yet replayed into it; each may add one photo it lacks,
    so a shortfall of at most that many is replayed first (a catalogue that grows faster than
    the collection is small, as in a test, is no lost source)."""
    try:
        live = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        return SwitchGuard()
    before, after = store.count(live), store.count(job.collection)
    jobs.update(job.id, live_count=before, delete_budget=allowed(before, share))
    short = before - after - allowed(before, share)
    if job.force or short <= 0:
        return SwitchGuard()
    if short <= waiting:
        return SwitchGuard(replay=True)
    return SwitchGuard(refusal=too_few(job, live, before, after, share))


def too_few(job: JobStatus, live: str, before: int, after: int, share: float) -> str:
    """The refusal of a switch that would drop more than the share of the live photos."""
    return (
        f"refused: {job.collection} holds {after} photos, fewer than (1 - max_delete_share="
        f"{share:g}) x the {before} of the live index: switching would drop {before - after} "
        f"of them. {LIVE_ALIAS} still points at {live}. Check the source {job.source}; if it "
        f"is right, run the reindex again forced: `photosearch index reindex --force`, or "
        f"`force: true` in POST /v1/admin/reindex (`photosearch index drop {job.collection}` "
        f"frees this one)."
    )


def refuse(jobs: Jobs, work: WorkQueue, job_id: str, message: str) -> None:
    """End the job as refused, its work dropped: nothing more is planned or embedded."""
    job = jobs.get(job_id)
    if job is None or job.state in FINISHED:
        return
    jobs.update(job_id, refused=1)
    jobs.finish(job_id, JobState.FAILED, message)
    work.drop(job_id, jobs.ttl_s)
