"""Leases: a token whose holder is gone is taken back after the lease, not the visibility
timeout; one whose worker's heartbeat renews it keeps its work; a leased lock is renewed while
its owner lives and let go when it stops. The queue's clock is the test's, moved by hand."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobKind
from indexer.leases import LeasedLock, held_tokens
from indexer.plan.catalog import Photo
from indexer.plan.shards import ShardRange
from indexer.queue.messages import Batch, ShardUnit
from indexer.queue.workqueue import Tokens, WorkQueue

DAY = 86_400.0  # the visibility timeout: nothing here waits for it
LEASE = 10.0


class Clock:
    """The queue's clock, which a test moves on by hand."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def work(redis: Redis, clock: Clock) -> WorkQueue:
    return WorkQueue(redis, f"lease-{uuid.uuid4().hex[:8]}", now=clock)


def reserve(work: WorkQueue, job_id: str, embed: int = 2) -> Tokens:
    return work.reserve(
        job_id, max_embed=embed, max_plan=2, plan_ahead=100, ttl_s=DAY, lease_s=LEASE
    )


def a_job_with_batches(work: WorkQueue, n: int) -> str:
    """A job whose round has n batches waiting and its one unit planned."""
    job_id = Jobs(work.redis, work.prefix).create(JobKind.SYNC)
    work.start_round(job_id, 0, [ShardUnit(ShardRange("a"))])
    [planner] = reserve(work, job_id, embed=0).plan
    work.claim_unit(job_id, planner)
    batches = [Batch(((Photo(f"k{i}", f"k{i}", "v1"), ""),)) for i in range(n)]
    work.commit(job_id, planner, "a", {}, batches=batches)
    return job_id


def test_a_claim_whose_worker_stopped_beating_is_taken_back_after_the_lease(
    work: WorkQueue, clock: Clock
) -> None:
    job_id = a_job_with_batches(work, 1)
    [token] = reserve(work, job_id).embed
    claimed = work.claim_batch(job_id, token)
    assert claimed is not None
    clock.t += LEASE - 1  # within the lease: the claim stays, no token more
    assert reserve(work, job_id).embed == []
    assert work.backlog(job_id)["embedding"] == 1
    clock.t += 2  # past it, a day before the visibility timeout: the batch is back in line
    [again] = reserve(work, job_id).embed
    assert work.backlog(job_id)["embedding"] == 0
    reclaimed = work.claim_batch(job_id, again)
    assert reclaimed is not None and reclaimed.id == claimed.id


def test_a_claim_whose_worker_beats_keeps_its_batch_past_the_lease(
    work: WorkQueue, clock: Clock
) -> None:
    job_id = a_job_with_batches(work, 1)
    [token] = reserve(work, job_id).embed
    work.claim_batch(job_id, token)
    for _ in range(10):  # ten leases long, renewed every third of one
        clock.t += LEASE / 3
        assert work.heartbeat({job_id: [token]}) == 1
        assert reserve(work, job_id).embed == []
    assert work.backlog(job_id)["embedding"] == 1
    work.complete(job_id, token, "b1", {"done": 1})
    assert work.heartbeat({job_id: [token]}) == 0  # a finished token is not held again


def test_a_token_received_then_dropped_gives_its_room_back_after_the_lease(
    work: WorkQueue, clock: Clock
) -> None:
    job_id = a_job_with_batches(work, 3)
    first = reserve(work, job_id, embed=1).embed
    assert work.heartbeat({job_id: first}) == 1  # its worker received it, never ran it
    clock.t += LEASE + 1
    # Its room came back: a new token for the batch it would have taken.
    assert len(reserve(work, job_id, embed=1).embed) == 1


def test_a_token_never_held_stops_covering_waiting_work_after_the_lease(
    work: WorkQueue, clock: Clock
) -> None:
    job_id = a_job_with_batches(work, 1)
    [lost] = reserve(work, job_id).embed
    clock.t += LEASE - 1  # perhaps still in the broker: the batch waits for it
    assert reserve(work, job_id).embed == []
    clock.t += 2  # perhaps lost in a delivery: the batch gets a token of its own
    [own] = reserve(work, job_id).embed
    assert own != lost
    # The doubtful token keeps its room until the ttl: the broker holds at most max_embed.
    assert reserve(work, job_id).embed == []


def test_a_requeued_or_completed_token_leaves_nothing_held(work: WorkQueue, clock: Clock) -> None:
    job_id = a_job_with_batches(work, 2)
    one, two = reserve(work, job_id).embed
    work.claim_batch(job_id, one)
    work.claim_batch(job_id, two)
    work.requeue(job_id, one)
    work.complete(job_id, two, "b2", {"done": 1})
    held = work.keys(job_id)[-1]
    assert work.redis.zcard(held) == 0


@dataclass
class Request:
    id: str
    task_name: str
    args: Any


def test_the_held_tokens_are_the_token_tasks_of_a_worker_by_job() -> None:
    requests = [
        Request("j1-e1", "indexer.embed_batch", ["j1"]),
        Request("j1-p2", "indexer.plan", ("j1",)),
        Request("j2-e1", "indexer.embed_batch", ["j2"]),
        Request("x", "indexer.finalize", ["j1"]),
    ]
    held = held_tokens(requests, ("indexer.plan", "indexer.embed_batch"))
    assert held == {"j1": ["j1-e1", "j1-p2"], "j2": ["j2-e1"]}


def wait_for(condition: Any, ceiling_s: float = 30.0) -> None:
    """Until condition() is true; the ceiling only bounds a hang."""
    done = threading.Event()
    while not condition():
        if done.wait(0.02) or ceiling_s <= 0:
            raise AssertionError("the condition never held")
        ceiling_s -= 0.02


def test_a_leased_lock_is_renewed_while_its_owner_lives_and_let_go_when_it_stops(
    redis: Redis,
) -> None:
    name = f"lease-lock-{uuid.uuid4().hex[:8]}"
    lock = LeasedLock(redis, name, lease_s=0.6)
    assert lock.acquire(blocking=False)
    # Renewed every third of its lease: its time to live goes below and back above 500 ms,
    # over and over, past several leases.
    for _ in range(6):
        wait_for(lambda: redis.pttl(name) < 500)
        wait_for(lambda: redis.pttl(name) > 500)
    assert not LeasedLock(redis, name, lease_s=0.6).acquire(blocking=False)
    # Its owner stops renewing without letting go (a worker killed): the lock expires.
    assert lock._stop is not None
    lock._stop.set()
    wait_for(lambda: not redis.exists(name))
    other = LeasedLock(redis, name, lease_s=0.6)
    assert other.acquire(blocking=False)
    other.release()
    assert not redis.exists(name)


def test_a_leased_lock_whose_lease_ran_out_is_let_go_without_an_error(redis: Redis) -> None:
    name = f"lease-lock-{uuid.uuid4().hex[:8]}"
    lock = LeasedLock(redis, name, lease_s=0.6)
    assert lock.acquire(blocking=False)
    redis.delete(name)  # expired while its renewals failed, say
    other = LeasedLock(redis, name, lease_s=0.6)
    assert other.acquire(blocking=False)
    lock.release()
    assert redis.get(name) is not None  # the other owner's lock stays
    other.release()
