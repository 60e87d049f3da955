"""Job records in Redis: counts, rate and ETA per job, and the locks of the live collection."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from redis import Redis

from core.jobstatus import FINISHED, JobKind, JobState, JobStatus, job_status

if TYPE_CHECKING:
    from core.settings import Settings

# Take a lock for a job unless a job still running holds it; returns the holder that refused.
_CLAIM_LOCK = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  local state = redis.call('HGET', ARGV[2] .. holder, 'state')
  if state and state ~= 'done' and state ~= 'failed' and state ~= 'cancelled' then
    return holder
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return false
"""
_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# The same for a job that goes on (a resume): one that had failed or been cancelled is queued
# again in the same step, so that the lock it takes holds (a finished holder's is taken over).
_REOPEN_LOCK = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  local state = redis.call('HGET', ARGV[2] .. holder, 'state')
  if state and state ~= 'done' and state ~= 'failed' and state ~= 'cancelled' then
    return holder
  end
end
redis.call('SET', KEYS[1], ARGV[1])
local own = redis.call('HGET', KEYS[2], 'state')
if own == 'failed' or own == 'cancelled' then
  redis.call('HSET', KEYS[2], 'state', 'queued', 'finished_at', '0')
end
redis.call('HSET', KEYS[2], 'message', ARGV[3])
return false
"""
# The first job in line for a lock takes it once no running job holds it (as _CLAIM_LOCK
# tells); one no longer queued (cancelled, expired) leaves the line. Returns the one that took it.
_CLAIM_NEXT = """
local holder = redis.call('GET', KEYS[1])
if holder then
  local state = redis.call('HGET', ARGV[1] .. holder, 'state')
  if state and state ~= 'done' and state ~= 'failed' and state ~= 'cancelled' then
    return false
  end
end
for _, job in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  redis.call('LREM', KEYS[2], 1, job)
  if redis.call('HGET', ARGV[1] .. job, 'state') == 'queued' then
    redis.call('SET', KEYS[1], job)
    return job
  end
end
return false
"""
_MAX_PROBLEMS = 1000


# One job at a time changes the live collection (a sync or increment, or a reindex's catch-up);
# one reindex at a time builds a new one.
LIVE_LOCK = "live"
REINDEX_LOCK = "reindex"


class Jobs:
    """Job records and the locks that keep two jobs from changing one collection at once."""

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
        self._claim_lock = redis.register_script(_CLAIM_LOCK)
        self._release_lock = redis.register_script(_RELEASE_LOCK)
        self._reopen_lock = redis.register_script(_REOPEN_LOCK)
        self._claim_next = redis.register_script(_CLAIM_NEXT)

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
        for lock in (LIVE_LOCK, REINDEX_LOCK):
            self.release_lock(lock, job_id)
        if self.on_finish is not None:
            kind = self.redis.hget(self._key("job", job_id), "kind")
            self.on_finish(kind.decode() if isinstance(kind, bytes) else "", str(state))

    def get(self, job_id: str) -> JobStatus | None:
        raw: dict[bytes, bytes] = self.redis.hgetall(self._key("job", job_id))  # type: ignore[assignment]
        if not raw:
            return None
        return job_status({k.decode(): v.decode() for k, v in raw.items()})

    def wait(self, job_id: str, timeout_s: float, poll_s: float = 0.05) -> JobStatus | None:
        """The job once it has finished, or its latest record when timeout_s passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get(job_id)
            if (job is not None and job.state in FINISHED) or time.monotonic() >= deadline:
                return job
            time.sleep(poll_s)

    def delete(self, job_id: str) -> None:
        """Forget a job that never started (a refused or joined request)."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self._key("job", job_id))
            pipe.zrem(self._key("jobs"), job_id)
            pipe.execute()

    def claim_lock(self, name: str, job_id: str) -> str | None:
        """Take a lock for a job; the id of the running job that holds it instead, if any (a
        lock whose job has finished, or whose record expired, is taken over)."""
        holder = self._claim_lock(
            keys=[self._key("lock", name)], args=[job_id, self._key("job", "")]
        )
        return holder.decode() if holder else None

    def reopen(self, name: str, job_id: str, message: str) -> str | None:
        """Take a lock for a job that goes on again (a resume), as claim_lock does; one that
        had failed or been cancelled is queued again in the same step, with this message. The
        id of the running job that holds the lock instead, if any (then nothing changes)."""
        holder = self._reopen_lock(
            keys=[self._key("lock", name), self._key("job", job_id)],
            args=[job_id, self._key("job", ""), message],
        )
        return holder.decode() if holder else None

    def wait_in_line(self, name: str, job_id: str, message: str) -> None:
        """Put a queued job in line for a lock, its message saying what it waits for:
        claim_next gives it the lock once the jobs before it and the holder are done."""
        with self.redis.pipeline() as pipe:
            pipe.hset(self._key("job", job_id), "message", message)
            pipe.rpush(self._key("lock", name, "line"), job_id)
            pipe.execute()

    def in_line(self, name: str) -> list[JobStatus]:
        """The jobs waiting in line for a lock, first first."""
        ids: list[bytes] = self.redis.lrange(self._key("lock", name, "line"), 0, -1)  # type: ignore[assignment]
        jobs = (self.get(i.decode()) for i in ids)
        return [job for job in jobs if job is not None and job.state == JobState.QUEUED]

    def claim_next(self, name: str) -> str | None:
        """Give a lock that no running job holds to the first job in line for it; its id."""
        job_id = self._claim_next(
            keys=[self._key("lock", name), self._key("lock", name, "line")],
            args=[self._key("job", "")],
        )
        return job_id.decode() if job_id else None

    def release_lock(self, name: str, job_id: str) -> None:
        self._release_lock(keys=[self._key("lock", name)], args=[job_id])

    def lock_holder(self, name: str) -> str | None:
        raw: bytes | None = self.redis.get(self._key("lock", name))  # type: ignore[assignment]
        return raw.decode() if raw else None

    def recent(self, limit: int = 20) -> list[JobStatus]:
        ids: list[bytes] = self.redis.zrevrange(self._key("jobs"), 0, limit - 1)  # type: ignore[assignment]
        return [job for job in (self.get(i.decode()) for i in ids) if job is not None]

    def add(self, job_id: str, **counts: int) -> None:
        with self.redis.pipeline() as pipe:
            for name, value in counts.items():
                pipe.hincrby(self._key("job", job_id), name, value)
            pipe.execute()

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

    def remember(self, name: str, value: str) -> None:
        self.redis.set(self._key(name), value)

    def recall(self, name: str) -> str | None:
        raw: bytes | None = self.redis.get(self._key(name))  # type: ignore[assignment]
        return raw.decode() if raw else None
