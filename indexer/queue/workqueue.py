"""A job's work in Redis: shards to plan, batches to embed, and the tokens that pull them.

The broker never carries the work itself, only tokens: a plan token (queue `plan`) takes one
shard of the job, an embed token (queue `embed`) one batch. Tokens are handed out (`reserve`)
so that at most `max_queued` embed tokens of a job exist at once, and plan tokens only while
fewer than `plan_ahead` batches wait: the broker's memory is bounded whatever the catalogue's
size, and planning goes on as batches complete. Every change is one Lua script, so it happens
whole or not at all:

- a token claims its shard or batch under its own task id: a token delivered again after its
  worker died (or retried) finds the same work, and none is done by two tokens at once;
- a planned shard commits its batches and counts once (fenced by the shard's id);
- a batch counts once (its entry is deleted by the count);
- the round ends exactly once: when nothing is left to plan, claimed or embedded.

A token a worker holds (it claimed its work, or the worker received it) is renewed by that
worker's heartbeat (`heartbeat`, indexer/rounds.py); once not renewed for `lease_s` (the
worker died, or the queue's Redis restarted under it) it is swept: its room comes back and its
work goes first in line, within seconds whatever the visibility timeout. A token never held
(lost between reservation and publication, or in a delivery cut short) is swept after `ttl_s`,
and does not keep waiting work from a token of its own past the lease. Each worker nudges the
unfinished jobs now and then (indexer/rounds.py), so a job whose every token was lost still
moves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from redis import Redis

from indexer.queue.messages import Batch, Unit, unit_from_wire
from indexer.queue.scripts import (
    ADD_UNITS,
    CLAIM,
    COMMIT,
    COMPLETE,
    HEARTBEAT,
    HELD_KEY,
    JOB_KEYS,
    RELEASE,
    REQUEUE,
    RESERVE,
    START_ROUND,
)


@dataclass(frozen=True)
class Tokens:
    """Token ids to publish: embed tokens and plan tokens; and whether the round ended."""

    embed: list[str]
    plan: list[str]
    round_ended: bool = False


@dataclass(frozen=True)
class Claimed:
    """What an embed token holds: a batch's id and the batch (None when counted already)."""

    id: str
    body: Batch | None


class WorkQueue:
    """The work of every job, in one Redis.

    `now` is the clock a token's hand-out and claims are stamped with, which the sweep's ttl
    is measured against: the workers' own clock unless a test brings one.
    """

    def __init__(self, redis: Redis, prefix: str, *, now: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.prefix = prefix
        self.now = now
        self._start = redis.register_script(START_ROUND)
        self._add = redis.register_script(ADD_UNITS)
        self._reserve = redis.register_script(RESERVE)
        self._claim = redis.register_script(CLAIM)
        self._commit = redis.register_script(COMMIT)
        self._complete = redis.register_script(COMPLETE)
        self._release = redis.register_script(RELEASE)
        self._requeue = redis.register_script(REQUEUE)
        self._heartbeat = redis.register_script(HEARTBEAT)

    def keys(self, job_id: str) -> list[str]:
        job = f"{self.prefix}:job:{job_id}"
        return [job, *(f"{job}:{name}" for name in (*JOB_KEYS, HELD_KEY))]

    def start_round(self, job_id: str, round_: int, units: Iterable[Unit]) -> bool:
        """Open a round with its units; False when it was opened before, whose
        units are then added again (each once: a start run again after a crash)."""
        started = bool(self._start(keys=self.keys(job_id), args=[round_]))
        self.add_units(job_id, units)
        return started

    def add_units(self, job_id: str, units: Iterable[Unit]) -> int:
        added, chunk = 0, []
        for unit in units:
            chunk += [unit.id, json.dumps(unit.to_wire())]
            if len(chunk) >= 2000:
                added += int(self._add(keys=self.keys(job_id), args=chunk))
                chunk = []
        if chunk:
            added += int(self._add(keys=self.keys(job_id), args=chunk))
        return added

    def reserve(
        self,
        job_id: str,
        *,
        max_embed: int,
        max_plan: int,
        plan_ahead: int,
        ttl_s: float,
        lease_s: float,
    ) -> Tokens:
        """Tokens to publish now (their ids are taken: publish each, or it is swept later),
        after the sweep of the tokens whose holder is gone (`lease_s`) or never came (`ttl_s`)."""
        args: list[Any] = [self.now(), ttl_s, max_embed, max_plan, plan_ahead, job_id, lease_s]
        embed, plan, ended = self._reserve(keys=self.keys(job_id), args=args)
        return Tokens([i.decode() for i in embed], [i.decode() for i in plan], bool(ended))

    def claim_unit(self, job_id: str, token: str) -> Unit | None:
        found = self._claim(keys=self.keys(job_id), args=[token, "unit", self.now()])
        return None if found is None else unit_from_wire(json.loads(found[1]))

    def claim_batch(self, job_id: str, token: str) -> Claimed | None:
        found = self._claim(keys=self.keys(job_id), args=[token, "work", self.now()])
        if found is None:
            return None
        batch_id, body = found[0].decode(), found[1]
        return Claimed(batch_id, Batch.from_wire(json.loads(body)) if body else None)

    def commit(
        self,
        job_id: str,
        token: str,
        unit_id: str,
        record: Mapping[str, Any],
        *,
        batches: Iterable[Batch] = (),
        units: Iterable[Unit] = (),
        counts: Mapping[str, int] | None = None,
        marks: Mapping[str, tuple[str, int]] | None = None,
    ) -> bool:
        """A unit's plan, once: its batches, the units it adds, the marks it sets (key ->
        (value, ttl s, 0 for none)), its counts. True when the round ended with it."""
        bodies = [json.dumps(batch.to_wire()) for batch in batches]
        pairs = [part for unit in units for part in (unit.id, json.dumps(unit.to_wire()))]
        args: list[Any] = [token, unit_id, json.dumps(record), len(bodies), *bodies]
        args += [len(pairs) // 2, *pairs]
        marked = [part for key, (value, ttl) in (marks or {}).items() for part in (key, value, ttl)]
        args += [len(marked) // 3, *marked]
        for name, value in (counts or {}).items():
            if value:
                args += [name, value]
        return bool(self._commit(keys=self.keys(job_id), args=args))

    def complete(self, job_id: str, token: str, batch_id: str, counts: Mapping[str, int]) -> bool:
        """Count a batch once; True when the round ended with it."""
        args: list[Any] = [token, batch_id]
        for name, value in counts.items():
            args += [name, value]
        return bool(self._complete(keys=self.keys(job_id), args=args))

    def heartbeat(self, held: Mapping[str, Collection[str]]) -> int:
        """Renew the lease of the tokens this worker holds, by job; how many were still out."""
        renewed, now = 0, self.now()
        for job_id, tokens in held.items():
            if tokens:
                renewed += int(self._heartbeat(keys=self.keys(job_id), args=[now, *tokens]))
        return renewed

    def release(self, job_id: str, token: str) -> bool:
        """A token that found nothing to claim; True when the round ended (a last token)."""
        return bool(self._release(keys=self.keys(job_id), args=[token]))

    def requeue(
        self,
        job_id: str,
        token: str | None = None,
        *,
        running: Collection[str] = (),
        before: float | None = None,
    ) -> int:
        """Give back what a token claimed, first in line; the token is forgotten. For None,
        every token's (a job resumed after its workers died or it was stopped) but those of
        `running` tasks and those that claimed at or after `before`: tasks live workers run,
        whose batches would be embedded twice. How many tokens were forgotten."""
        if token is not None:
            return int(self._requeue(keys=self.keys(job_id), args=[token]))
        bound = "+inf" if before is None else f"({before!r}"
        return int(self._requeue(keys=self.keys(job_id), args=["", bound, *running]))

    def round_done(self, job_id: str, round_: int) -> bool:
        """Whether that round of the job has ended."""
        return bool(self.redis.hexists(self.keys(job_id)[0], f"round_done:{round_}"))

    def planned(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The records of this round's planned shards, by shard id."""
        raw: dict[bytes, bytes] = self.redis.hgetall(self.keys(job_id)[9])  # type: ignore[assignment]
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def backlog(self, job_id: str) -> dict[str, int]:
        """Shards waiting, shards being planned, batches waiting, batches being embedded."""
        keys = self.keys(job_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(keys[1])
            pipe.hlen(keys[2])
            pipe.llen(keys[4])
            pipe.hlen(keys[6])
            shards, planning, batches, embedding = pipe.execute()
        return {"shards": shards, "planning": planning, "batches": batches, "embedding": embedding}

    def drop(self, job_id: str, keep_s: int) -> None:
        """Forget a finished job's work; what its shards' planning recorded (who planned what,
        when, what it found: one entry per shard) is kept keep_s, as the job's record."""
        keys = self.keys(job_id)
        self.redis.delete(*keys[1:9], keys[10])
        self.redis.expire(keys[9], keep_s)
