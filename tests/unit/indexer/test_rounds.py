"""indexer/rounds.py's pump over a real work queue (the tests' Redis) and the worker's real
app: it publishes exactly the tokens the job has room for, each under its token's id, and says
when the round has ended; the nudge starts again a sync paused in its first task once its
dependencies answer. Publishing is recorded instead of sent (no broker here)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from celery.worker import state as worker_state
from redis import Redis

from core.embedding.errors import TritonUnavailable
from core.jobs import Jobs
from core.jobstatus import JobKind, JobState
from core.settings import Settings
from core.settings_indexer import IndexerSettings
from core.taskqueue import EMBED_BATCH, PLAN, SYNC
from core.vectorstore import LIVE_ALIAS, VectorStore
from indexer import rounds
from indexer.app import create_app
from indexer.jobs.pause import pause
from indexer.plan.shards import ShardRange
from indexer.queue.messages import ShardUnit
from indexer.queue.records import JobRecords
from indexer.queue.workqueue import WorkQueue
from indexer.rounds import heartbeat, nudge, pump
from tests.unit.indexer.conftest import COLLECTION


class Published:
    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple[Any, ...], str]] = []

    def recorder(self, name: str) -> Any:
        def apply_async(args: tuple[Any, ...], task_id: str) -> None:
            self.sent.append((name, args, task_id))

        return apply_async


def test_pump_publishes_the_room_of_the_job_and_then_nothing_more(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = IndexerSettings(planners=2, max_queued_batches=3)
    app = create_app(Settings(indexer=settings))
    published = Published()
    for name in (PLAN, EMBED_BATCH):
        monkeypatch.setattr(app.tasks[name], "apply_async", published.recorder(name))
    prefix = f"rounds-{uuid.uuid4().hex[:8]}"
    job_id = Jobs(redis, prefix).create(JobKind.SYNC)
    work = WorkQueue(redis, prefix)
    work.start_round(job_id, 0, [ShardUnit(ShardRange(n)) for n in "abc"])

    assert not pump(app, work, settings, job_id)
    # Three shards wait and no batch yet: two planners (their room), no embedding.
    assert [(name, args) for name, args, _ in published.sent] == [(PLAN, (job_id,))] * 2
    tokens = [token for _, _, token in published.sent]
    assert len(set(tokens)) == 2 and all(token.startswith(job_id) for token in tokens)
    # Pumped again with both tokens out: the room is taken, nothing more is sent.
    assert not pump(app, work, settings, job_id)
    assert len(published.sent) == 2


def test_pump_says_when_an_empty_round_has_ended(redis: Redis) -> None:
    settings = IndexerSettings()
    app = create_app(Settings(indexer=settings))
    prefix = f"rounds-{uuid.uuid4().hex[:8]}"
    job_id = Jobs(redis, prefix).create(JobKind.SYNC)
    work = WorkQueue(redis, prefix)
    work.start_round(job_id, 0, [])
    assert pump(app, work, settings, job_id)


class Request:
    """The parts of a Celery request the heartbeat reads."""

    def __init__(self, task_id: str, name: str, job_id: str) -> None:
        self.id, self.task_name, self.args = task_id, name, [job_id]


def test_the_heartbeat_renews_the_tokens_received_and_waiting_for_a_retry(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_700_000_000.0]
    work = WorkQueue(redis, f"beat-{uuid.uuid4().hex[:8]}", now=lambda: now[0])
    job_id = Jobs(redis, work.prefix).create(JobKind.SYNC)
    work.start_round(job_id, 0, [ShardUnit(ShardRange("a")), ShardUnit(ShardRange("b"))])
    one, two = work.reserve(
        job_id, max_embed=0, max_plan=2, plan_ahead=8, ttl_s=86_400, lease_s=10
    ).plan
    received = Request(one, PLAN, job_id)
    retrying = Request(two, PLAN, job_id)  # in the timer until its countdown ends
    monkeypatch.setattr(worker_state, "requests", {one: received})
    monkeypatch.setattr(worker_state, "scheduled_requests", {retrying})
    work.claim_unit(job_id, two)
    for _ in range(6):  # two leases long
        now[0] += 10 / 3
        assert heartbeat(work) == 2
        work.reserve(job_id, max_embed=0, max_plan=2, plan_ahead=8, ttl_s=86_400, lease_s=10)
    assert work.backlog(job_id)["planning"] == 1  # the retrying token kept its unit
    monkeypatch.setattr(worker_state, "scheduled_requests", set())  # its worker died
    now[0] += 11
    work.reserve(job_id, max_embed=0, max_plan=2, plan_ahead=8, ttl_s=86_400, lease_s=10)
    assert work.backlog(job_id)["planning"] == 0


def test_the_nudge_starts_again_a_sync_paused_in_its_first_task_once_triton_answers(
    records: JobRecords, store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(Settings())
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(app.tasks[SYNC], "delay", lambda *args: sent.append(args))
    answers = {"triton": False}
    monkeypatch.setattr(rounds, "triton_ready", lambda rt: lambda version: answers["triton"])
    rt: Any = SimpleNamespace(
        jobs=records.jobs, work=records.work, store=store, settings=Settings()
    )
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    job_id = records.jobs.create(JobKind.SYNC, source="file:///photos")
    pause(records.jobs, job_id, TritonUnavailable("down"), first_step=True)

    nudge(app, rt)  # Triton still down: it stays paused, nothing sent
    assert (records.jobs.get(job_id).state, sent) == (JobState.PAUSED, [])  # type: ignore[union-attr]
    answers["triton"] = True
    nudge(app, rt)
    assert sent == [(job_id, "file:///photos")]
    assert records.jobs.get(job_id).state == JobState.QUEUED  # type: ignore[union-attr]
    nudge(app, rt)  # queued again, its task sent once: the next nudges leave it
    assert sent == [(job_id, "file:///photos")]
