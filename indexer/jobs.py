"""Job records in Redis: counts, rate and ETA per job, idempotent batch completion, skip records."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from redis import Redis

if TYPE_CHECKING:
    from photosearch.settings import Settings

# A batch counts once however often it runs (retries, redelivery after a worker died): its id
# joins a set, and only the first SADD adds its counts. Returns 1 when it was the last batch.
# A batch counted before answers as the last again while the job's batches are all done: a
# worker whose reply was lost (Redis killed after the script ran) retries the batch, and the
# job must still be finished; batches_finished acts only on a job still running.
_COMPLETE = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  if redis.call('HGET', KEYS[1], 'batches_done') == redis.call('HGET', KEYS[1], 'batches_total')
  then return 1 end
  return -1
end
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('HINCRBY', KEYS[1], 'done', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'failed', ARGV[4])
local finished = redis.call('HINCRBY', KEYS[1], 'batches_done', 1)
if finished == tonumber(redis.call('HGET', KEYS[1], 'batches_total') or '-1') then return 1 end
return 0
"""
_MAX_PROBLEMS = 1000


class JobKind(StrEnum):
    SYNC = "sync"
    REINDEX = "reindex"
    ROLLBACK = "rollback"


class JobState(StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    RUNNING = "running"
    FINALIZING = "finalizing"
    DONE = "done"
    FAILED = "failed"


FINISHED = (JobState.DONE, JobState.FAILED)
_INTS = (
    *("total", "done", "failed", "skipped", "deleted", "updated", "unchanged"),
    *("batches_total", "batches_done", "model_version", "rounds"),
)
_FLOATS = ("created_at", "started_at", "finished_at")


@dataclass
class JobStatus:
    """One job as `photosearch index status` shows it."""

    id: str
    kind: str
    state: str
    source: str = ""
    collection: str = ""
    model_version: int = 0
    total: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    deleted: int = 0
    updated: int = 0
    unchanged: int = 0
    batches_total: int = 0
    batches_done: int = 0
    rounds: int = 0
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    message: str = ""

    @property
    def processed(self) -> int:
        return self.done + self.failed + self.skipped

    @property
    def elapsed_s(self) -> float:
        if not self.started_at:
            return 0.0
        return (self.finished_at or time.time()) - self.started_at

    @property
    def images_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before there is a rate."""
        if self.state in FINISHED:
            return 0.0
        rate = self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return (self.total - self.processed) / rate if rate > 0 else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["images_per_s"] = round(self.images_per_s, 2)
        data["eta_s"] = None if self.eta_s is None else round(self.eta_s, 1)
        return data


class Jobs:
    """Job records, the skip records of each collection, and the indexer's locks."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        ttl_days: int = 30,
        on_finish: Callable[[str, str], None] | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_days * 86400
        # Told (kind, state) of each job that ends here: the worker's metrics count them.
        self.on_finish = on_finish
        self._complete = redis.register_script(_COMPLETE)

    @classmethod
    def from_settings(cls, settings: Settings, **redis_options: Any) -> Jobs:
        """The job records of this deployment (PHOTOSEARCH_REDIS__URL), kept as long as the
        settings say: every process that creates or reads jobs opens them this way."""
        return cls(
            Redis.from_url(settings.redis.url, **redis_options),
            settings.redis.prefix,
            settings.indexer.job_ttl_days,
        )

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def create(self, kind: JobKind, **fields: Any) -> str:
        job_id = uuid.uuid4().hex[:12]
        now = time.time()
        record = {"id": job_id, "kind": kind, "state": JobState.QUEUED, "created_at": now}
        record.update(fields)
        key = self._key("job", job_id)
        with self.redis.pipeline() as pipe:
            pipe.hset(key, mapping={k: str(v) for k, v in record.items()})
            pipe.expire(key, self.ttl_s)
            pipe.zadd(self._key("jobs"), {job_id: now})
            pipe.execute()
        return job_id

    def update(self, job_id: str, **fields: Any) -> None:
        self.redis.hset(self._key("job", job_id), mapping={k: str(v) for k, v in fields.items()})

    def start(self, job_id: str, **fields: Any) -> None:
        self.update(job_id, started_at=time.time(), **fields)

    def finish(self, job_id: str, state: JobState, message: str = "") -> None:
        fields: dict[str, Any] = {"state": state, "finished_at": time.time()}
        if message:
            fields["message"] = message
        self.update(job_id, **fields)
        if self.on_finish is not None:
            kind = self.redis.hget(self._key("job", job_id), "kind")
            self.on_finish(kind.decode() if isinstance(kind, bytes) else "", str(state))

    def get(self, job_id: str) -> JobStatus | None:
        raw: dict[bytes, bytes] = self.redis.hgetall(self._key("job", job_id))  # type: ignore[assignment]
        if not raw:
            return None
        data: dict[str, Any] = {k.decode(): v.decode() for k, v in raw.items()}
        for name in _INTS:
            data[name] = int(data.get(name) or 0)
        for name in _FLOATS:
            data[name] = float(data.get(name) or 0.0)
        known = JobStatus.__dataclass_fields__
        return JobStatus(**{k: v for k, v in data.items() if k in known})

    def wait(self, job_id: str, timeout_s: float, poll_s: float = 0.05) -> JobStatus | None:
        """The job once it has finished, or its latest record when timeout_s passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get(job_id)
            if (job is not None and job.state in FINISHED) or time.monotonic() >= deadline:
                return job
            time.sleep(poll_s)

    def recent(self, limit: int = 20) -> list[JobStatus]:
        ids: list[bytes] = self.redis.zrevrange(self._key("jobs"), 0, limit - 1)  # type: ignore[assignment]
        return [job for job in (self.get(i.decode()) for i in ids) if job is not None]

    def add_batches(self, job_id: str, batches: int, photos: int) -> None:
        """Announce batches before they are sent, so no completion can see a short total."""
        with self.redis.pipeline() as pipe:
            pipe.hincrby(self._key("job", job_id), "batches_total", batches)
            pipe.hincrby(self._key("job", job_id), "total", photos)
            pipe.execute()

    def add(self, job_id: str, **counts: int) -> None:
        with self.redis.pipeline() as pipe:
            for name, value in counts.items():
                pipe.hincrby(self._key("job", job_id), name, value)
            pipe.execute()

    def complete_batch(
        self, job_id: str, batch_id: str, *, done: int, skipped: int, failed: int
    ) -> bool:
        """Count a batch once; True when the job's batches are all counted after it (for a
        batch counted before too: the first caller may not have heard the answer)."""
        keys = [self._key("job", job_id), self._key("job", job_id, "batches")]
        result = self._complete(keys=keys, args=[batch_id, done, skipped, failed, self.ttl_s])
        return bool(result == 1)

    def note_problems(self, job_id: str, lines: Iterable[str]) -> None:
        """Keep the first reasons of a job's skipped and failed photos, for the status."""
        lines = list(lines)
        if lines:
            key = self._key("job", job_id, "problems")
            with self.redis.pipeline() as pipe:
                pipe.rpush(key, *lines)
                pipe.ltrim(key, 0, _MAX_PROBLEMS - 1)
                pipe.expire(key, self.ttl_s)
                pipe.execute()

    def problems(self, job_id: str) -> list[str]:
        raw: list[bytes] = self.redis.lrange(self._key("job", job_id, "problems"), 0, -1)  # type: ignore[assignment]
        return [line.decode() for line in raw]

    # Skip records: a photo that could not be indexed, at the version that failed, with the
    # reason. A sync does not retry it until its file changes.
    def record_skipped(self, collection: str, entries: Mapping[str, tuple[str, str]]) -> None:
        if entries:
            self.redis.hset(
                self._key("skipped", collection),
                mapping={
                    photo_id: json.dumps({"version": version, "reason": reason})
                    for photo_id, (version, reason) in entries.items()
                },
            )

    def skipped(self, collection: str) -> dict[str, tuple[str, str]]:
        """photo id -> (version, reason)."""
        raw: dict[bytes, bytes] = self.redis.hgetall(self._key("skipped", collection))  # type: ignore[assignment]
        out = {}
        for photo_id, value in raw.items():
            record = json.loads(value)
            out[photo_id.decode()] = (record["version"], record["reason"])
        return out

    def forget_skipped(self, collection: str, photo_ids: Iterable[str]) -> None:
        photo_ids = list(photo_ids)
        if photo_ids:
            self.redis.hdel(self._key("skipped", collection), *photo_ids)

    def drop_skipped(self, collection: str) -> None:
        self.redis.delete(self._key("skipped", collection))

    def remember(self, name: str, value: str) -> None:
        self.redis.set(self._key(name), value)

    def recall(self, name: str) -> str | None:
        raw: bytes | None = self.redis.get(self._key(name))  # type: ignore[assignment]
        return raw.decode() if raw else None
