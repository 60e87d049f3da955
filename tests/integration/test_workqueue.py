"""A job's work in Redis, script by script, against the session's Redis (the tests' own)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from redis import Redis

from core.jobs import LIVE_LOCK, Jobs
from core.jobstatus import JobKind, JobState
from indexer.photo.skips import SkipRecords
from indexer.plan.catalog import Photo
from indexer.plan.shards import ShardRange
from indexer.queue.messages import Batch, FeedUnit, ShardUnit, Unit
from indexer.queue.workqueue import WorkQueue


@pytest.fixture
def prefix() -> str:
    return f"wq-{uuid.uuid4().hex[:8]}"


class Clock:
    """The queue's clock, which a test moves on by hand."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def work(redis: Redis, prefix: str, clock: Clock) -> WorkQueue:
    return WorkQueue(redis, prefix, now=clock)


@pytest.fixture
def jobs(redis: Redis, prefix: str) -> Jobs:
    return Jobs(redis, prefix)


def units(*names: str) -> list[ShardUnit]:
    return [ShardUnit(ShardRange(name)) for name in names]


def batch(key: object) -> Batch:
    """A batch of one photo, told apart by its key."""
    return Batch(((Photo(str(key), str(key), "v1"), ""),))


def reserve(
    work: WorkQueue, job_id: str, embed: int = 3, plan: int = 2, ahead: int = 100, ttl: float = 600
) -> tuple[list[str], list[str]]:
    tokens = work.reserve(
        job_id, max_embed=embed, max_plan=plan, plan_ahead=ahead, ttl_s=ttl, lease_s=ttl
    )
    return tokens.embed, tokens.plan


def planning(work: WorkQueue, job_id: str, unit: Unit) -> str:
    """A round of one unit, its planner's token reserved and the unit claimed: the token."""
    work.start_round(job_id, 0, [unit])
    _, [planner] = reserve(work, job_id, plan=1)
    work.claim_unit(job_id, planner)
    return planner


def test_a_round_opens_once_and_takes_each_unit_once(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    assert work.start_round(job, 0, units("a", "b"))
    # Started again (a task delivered twice): nothing is reset, no unit comes twice.
    assert not work.start_round(job, 0, units("a", "b", "c"))
    assert work.backlog(job)["shards"] == 3
    status = jobs.get(job)
    assert status is not None and (status.round, status.shards_total) == (0, 3)


def test_plan_tokens_take_units_and_the_claim_survives_a_redelivery(
    work: WorkQueue, jobs: Jobs
) -> None:
    job = jobs.create(JobKind.SYNC)
    work.start_round(job, 0, units("a", "b", "c"))
    embed, plan = reserve(work, job, plan=2)
    assert embed == [] and len(plan) == 2
    assert reserve(work, job, plan=2) == ([], [])  # both still outstanding
    first = work.claim_unit(job, plan[0])
    assert first == ShardUnit(ShardRange("a"))
    assert work.claim_unit(job, plan[0]) == first  # the same token again: the same unit
    assert work.claim_unit(job, plan[1]) == ShardUnit(ShardRange("b"))


def test_a_unit_commits_its_batches_and_counts_once(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    work.start_round(job, 0, units("a", "b"))
    _, (token, other) = reserve(work, job)
    work.claim_unit(job, token)
    batches = [batch("x"), batch("y")]
    record = {"label": "a", "points": 2}
    assert not work.commit(
        job, token, "a", record, batches=batches, counts={"total": 2, "listed": 2}
    )
    # The same unit committed again (by any token) adds nothing.
    assert not work.commit(job, other, "a", record, batches=batches, counts={"total": 2})
    status = jobs.get(job)
    assert status is not None
    assert (status.total, status.listed, status.batches_total, status.shards_planned) == (
        2,
        2,
        2,
        1,
    )
    assert work.backlog(job) == {"shards": 1, "planning": 0, "batches": 2, "embedding": 0}
    assert work.planned(job) == {"a": record}


def test_embed_tokens_never_outnumber_the_room_and_come_back_as_batches_end(
    work: WorkQueue, jobs: Jobs
) -> None:
    job = jobs.create(JobKind.SYNC)
    planner = planning(work, job, units("a")[0])
    batches = [batch(n) for n in range(5)]
    work.commit(job, planner, "a", {}, batches=batches)
    embed, _ = reserve(work, job, embed=3)
    assert len(embed) == 3 and reserve(work, job, embed=3) == ([], [])
    claimed = work.claim_batch(job, embed[0])
    assert claimed is not None and claimed.body == batches[0]
    assert work.claim_batch(job, embed[0]) == claimed  # redelivered or retried: the same batch
    assert not work.complete(job, embed[0], claimed.id, {"done": 1})
    more, _ = reserve(work, job, embed=3)
    assert len(more) == 1  # one ended, one more; 4 batches wait for 3 tokens


def test_planning_waits_while_enough_batches_wait(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    work.start_round(job, 0, units("a", "b", "c"))
    _, [planner] = reserve(work, job, plan=1)
    work.claim_unit(job, planner)
    work.commit(job, planner, "a", {}, batches=[batch(n) for n in range(4)])
    assert reserve(work, job, embed=0, plan=5, ahead=4)[1] == []  # 4 waiting: no planner
    assert len(reserve(work, job, embed=0, plan=5, ahead=5)[1]) == 2  # two shards left


def test_a_batch_counts_once_and_the_round_ends_once(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    planner = planning(work, job, units("a")[0])
    assert not work.commit(job, planner, "a", {}, batches=[batch(1), batch(2)])
    one, two = reserve(work, job, embed=2)[0]
    first, second = work.claim_batch(job, one), work.claim_batch(job, two)
    assert first is not None and second is not None
    assert not work.complete(job, one, first.id, {"done": 2})
    # Its worker died after the count and before the ack: delivered again, counted before.
    again = work.claim_batch(job, one)
    assert again is None  # its claim went with the count: a new batch is looked for; none
    assert work.complete(job, two, second.id, {"done": 1, "skipped": 1})  # the last: ends
    # The last batch counted again (Redis lost the reply): counted once, the round ended once.
    assert not work.complete(job, two, second.id, {"done": 1, "skipped": 1})
    status = jobs.get(job)
    assert status is not None
    assert (status.done, status.skipped, status.batches_done, status.batches_total) == (3, 1, 2, 2)


def test_a_claimed_batch_counted_meanwhile_comes_back_empty(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    planner = planning(work, job, units("a")[0])
    work.commit(job, planner, "a", {}, batches=[batch(1)])
    [token] = reserve(work, job)[0]
    claimed = work.claim_batch(job, token)
    assert claimed is not None
    # Counted by a failure handler while the token's retry was still queued.
    work.redis.hdel(work.keys(job)[5], claimed.id)
    assert work.claim_batch(job, token) == type(claimed)(claimed.id, None)


def test_tokens_lost_before_they_were_sent_are_swept(
    work: WorkQueue, jobs: Jobs, clock: Clock
) -> None:
    job = jobs.create(JobKind.SYNC)
    work.start_round(job, 0, units("a", "b"))
    _, _lost = reserve(work, job, plan=2)
    clock.advance(0.9)
    assert reserve(work, job, plan=2, ttl=1)[1] == []  # within the ttl: still out
    clock.advance(0.2)
    assert len(reserve(work, job, plan=2, ttl=1)[1]) == 2  # never claimed: their room is back


def test_a_token_that_died_holding_a_batch_gives_it_back(
    work: WorkQueue, jobs: Jobs, clock: Clock
) -> None:
    job = jobs.create(JobKind.SYNC)
    planner = planning(work, job, units("a")[0])
    work.commit(job, planner, "a", {}, batches=[batch(1), batch(2)])
    dead, alive = reserve(work, job, embed=2)[0]
    lost = work.claim_batch(job, dead)
    assert lost is not None and lost.body == batch(1)
    clock.advance(0.6)
    kept = work.claim_batch(job, alive)  # claiming shows a token alive
    assert kept is not None
    clock.advance(0.6)
    # The dead token's claim is older than the ttl: its batch goes back, first in line.
    [again] = reserve(work, job, embed=2, ttl=1)[0]
    assert work.claim_batch(job, again) == lost
    assert work.claim_batch(job, alive) == kept


def test_a_resume_gives_back_what_dead_tokens_held_not_what_running_tasks_hold(
    work: WorkQueue, jobs: Jobs, clock: Clock
) -> None:
    job = jobs.create(JobKind.REINDEX)
    planner = planning(work, job, units("a")[0])
    work.commit(job, planner, "a", {}, batches=[batch(n) for n in range(5)])
    dead, running, late, _unsent = reserve(work, job, embed=4)[0]
    lost = work.claim_batch(job, dead)
    held = work.claim_batch(job, running)
    # The resume asked the workers after these two claims; `late` claims while it asks.
    clock.advance(1)
    asked = clock()
    taken = work.claim_batch(job, late)

    assert work.requeue(job, running=[running], before=asked) == 2  # dead, and unsent
    # The dead token's batch is first in line; the others stay with their tasks.
    [again] = reserve(work, job, embed=3)[0]
    assert work.claim_batch(job, again) == lost
    assert work.claim_batch(job, running) == held
    assert work.claim_batch(job, late) == taken
    assert work.backlog(job) == {"shards": 0, "planning": 0, "batches": 2, "embedding": 3}


def test_no_round_ends_before_it_has_started(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    # A nudge between a job's start and its first shards: nothing to end.
    assert not work.reserve(
        job, max_embed=1, max_plan=1, plan_ahead=1, ttl_s=60, lease_s=60
    ).round_ended
    planner = planning(work, job, units("a")[0])
    work.commit(job, planner, "a", {})  # the round's last unit, nothing to embed: it ends here
    assert work.round_done(job, 0)
    assert not work.reserve(
        job, max_embed=1, max_plan=1, plan_ahead=1, ttl_s=60, lease_s=60
    ).round_ended


def test_a_finished_job_hands_out_and_takes_nothing(work: WorkQueue, jobs: Jobs) -> None:
    job = jobs.create(JobKind.SYNC)
    work.start_round(job, 0, units("a"))
    _, [planner] = reserve(work, job, plan=1)
    jobs.finish(job, JobState.FAILED, "cancelled")
    assert work.claim_unit(job, planner) is None
    assert reserve(work, job) == ([], [])
    assert not work.commit(job, planner, "a", {}, batches=[batch(1)])
    assert work.backlog(job)["batches"] == 0


def test_a_commit_sets_the_feed_s_marks_with_its_plan(
    work: WorkQueue, jobs: Jobs, prefix: str
) -> None:
    job = jobs.create(JobKind.INCREMENT)
    planner = planning(work, job, FeedUnit(0))
    marks = {f"{prefix}:offset": ("7:120", 0), f"{prefix}:seen:m1": ("1", 60)}
    units_added = [FeedUnit(1)]
    work.commit(job, planner, "feed:0", {}, units=units_added, marks=marks)
    assert work.redis.get(f"{prefix}:offset") == b"7:120"
    assert work.redis.ttl(f"{prefix}:offset") == -1
    assert 0 < work.redis.ttl(f"{prefix}:seen:m1") <= 60
    assert work.backlog(job)["shards"] == 1


def test_one_job_at_a_time_holds_the_live_collection(jobs: Jobs) -> None:
    first = jobs.create(JobKind.SYNC)
    second = jobs.create(JobKind.INCREMENT)
    assert jobs.claim_lock(LIVE_LOCK, first) is None
    assert jobs.claim_lock(LIVE_LOCK, second) == first
    assert jobs.claim_lock(LIVE_LOCK, first) is None  # its own lock again
    jobs.finish(first, JobState.DONE)  # finishing releases it
    assert jobs.lock_holder(LIVE_LOCK) is None
    assert jobs.claim_lock(LIVE_LOCK, second) is None
    jobs.update(second, state=JobState.FAILED)  # ended without releasing (killed): taken over
    third = jobs.create(JobKind.SYNC)
    assert jobs.claim_lock(LIVE_LOCK, third) is None
    assert jobs.lock_holder(LIVE_LOCK) == third


def test_jobs_in_line_for_the_live_collection_take_it_in_turn_once_its_holder_ends(
    jobs: Jobs,
) -> None:
    nightly = jobs.create(JobKind.INCREMENT)
    assert jobs.claim_lock(LIVE_LOCK, nightly) is None
    cancelled, weekly, later = (jobs.create(JobKind.SYNC) for _ in range(3))
    for job in (cancelled, weekly, later):
        jobs.wait_in_line(LIVE_LOCK, job, f"waits for increment job {nightly}")
    jobs.finish(cancelled, JobState.CANCELLED)
    assert [job.id for job in jobs.in_line(LIVE_LOCK)] == [weekly, later]
    queued = jobs.get(weekly)
    assert queued is not None and queued.message == f"waits for increment job {nightly}"
    assert jobs.claim_next(LIVE_LOCK) is None  # submitted, its task not yet started
    jobs.update(nightly, state=JobState.RUNNING)
    assert jobs.claim_next(LIVE_LOCK) is None
    jobs.finish(nightly, JobState.DONE)
    assert jobs.claim_next(LIVE_LOCK) == weekly  # the one cancelled in line is passed over
    assert jobs.lock_holder(LIVE_LOCK) == weekly
    assert jobs.claim_next(LIVE_LOCK) is None  # the weekly's task has yet to start
    assert [job.id for job in jobs.in_line(LIVE_LOCK)] == [later]
    jobs.finish(weekly, JobState.FAILED)
    assert jobs.claim_next(LIVE_LOCK) == later
    jobs.finish(later, JobState.DONE)
    assert jobs.claim_next(LIVE_LOCK) is None and jobs.in_line(LIVE_LOCK) == []


def test_skip_records_are_read_by_key_range(redis: Redis, prefix: str) -> None:
    skips = SkipRecords(redis, prefix)
    skips.record("c", {"a": ("v1", "bad"), "a/b.jpg": ("v2", "worse"), "b.jpg": ("v1", "x")})
    skips.record("c", {"a/b.jpg": ("v3", "fixed? no")})  # replaces the key's record
    assert skips.in_range("c", "", None) == {
        "a": ("v1", "bad"),
        "a/b.jpg": ("v3", "fixed? no"),
        "b.jpg": ("v1", "x"),
    }
    assert skips.in_range("c", "a/", "a0") == {"a/b.jpg": ("v3", "fixed? no")}
    assert skips.in_range("c", "a", "a/b.jpg") == {"a": ("v1", "bad")}
    assert skips.get("c", ["a", "missing", "b.jpg"]) == {"a": ("v1", "bad"), "b.jpg": ("v1", "x")}
    skips.forget("c", ["a", "never"])
    assert skips.count("c") == 2 and skips.in_range("other", "", None) == {}
    skips.drop("c")
    assert skips.count("c") == 0


def test_the_scripts_survive_being_flushed_from_redis(
    work: WorkQueue, jobs: Jobs, redis: Redis, tmp_path: Path
) -> None:
    """A Redis restarted empty of scripts (SCRIPT FLUSH): redis-py loads them again."""
    redis.script_flush()
    job = jobs.create(JobKind.SYNC)
    assert work.start_round(job, 0, units("a"))
