"""Interleaved experiments in Redis: the one running between the live collection and a
candidate, its credited clicks, its sign test and its decision (switch or drop).

The records live in PhotoSearch's own Redis (PHOTOSEARCH_REDIS__URL, beside the job records,
under PHOTOSEARCH_REDIS__PREFIX), never the query cache's, whose keys may be evicted: the API
writes them and the indexer's reindex reads the decision (`decision_for`) before its switch.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from celery import Celery
from redis import Redis

from core.collectionroles import job_id_of
from core.jobs import Jobs
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.taskqueue import FINALIZE, send
from core.vectorstore import collection_name

Decision = Literal["switch", "drop"]
State = Literal["running", "switch", "drop"]
Side = Literal["live", "candidate"]
DECISIONS: tuple[Decision, ...] = ("switch", "drop")

# One click, credited once per (search, photo): a repeated event changes nothing. The
# search's outcome follows the clicks of both sides seen so far, and the counters move with it
# (a search whose first click was the candidate's is a win; a later click on a live result
# makes it a tie). Only a running experiment takes credits.
# KEYS: the experiment's hash, the clicks credited, the search's tally.
# ARGV: the experiment's id, the click's "search:photo", its side, the tally's TTL in seconds.
_CREDIT = """
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then return 0 end
local function outcome()
  local live = tonumber(redis.call('HGET', KEYS[3], 'live') or '0')
  local candidate = tonumber(redis.call('HGET', KEYS[3], 'candidate') or '0')
  if live + candidate == 0 then return nil end
  if candidate > live then return 'wins' end
  if live > candidate then return 'losses' end
  return 'ties'
end
local before = outcome()
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[4]))
local after = outcome()
if before == nil then
  redis.call('HINCRBY', KEYS[1], 'impressions', 1)
elseif before ~= after then
  redis.call('HINCRBY', KEYS[1], before, -1)
end
if before ~= after then redis.call('HINCRBY', KEYS[1], after, 1) end
return 1
"""
# End the experiment unless it has ended already; returns its state after.
_END = """
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return false end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then return state end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'ended_at', ARGV[3], 'ended_by', ARGV[4],
  'reason', ARGV[5])
return ARGV[2]
"""
# Start one unless one runs (returns the running one's id). KEYS: the latest's id, the new
# experiment's hash, its candidate's. ARGV: the hashes' prefix, its id, its fields in pairs.
_START = """
local latest = redis.call('GET', KEYS[1])
if latest and redis.call('HGET', ARGV[1] .. latest, 'state') == 'running' then
  return latest
end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[3], ARGV[2])
return false
"""
# A click can come a while after its search; its search's tally is kept this long.
_TALLY_TTL_S = 7 * 24 * 3600


class ExperimentError(Exception):
    """An experiment cannot start or end as asked; the message says why."""


@dataclass(frozen=True)
class Experiment:
    """One experiment as `photosearch experiment status` and the admin API show it."""

    id: str
    live: str  # the live collection when it started
    candidate: str
    share: float  # of text searches interleaved
    state: State
    started_at: float
    ended_at: float = 0.0
    ended_by: str = ""  # "admin" or "auto"
    reason: str = ""
    impressions: int = 0  # interleaved searches with at least one credited click
    wins: int = 0  # the candidate's results took more clicks
    losses: int = 0
    ties: int = 0

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def p_value(self) -> float:
        return sign_test(self.wins, self.losses)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "p_value": self.p_value}


def _key(prefix: str, *parts: str) -> str:
    return ":".join((prefix, "experiment", *parts))


def _by_candidate(prefix: str, collection: str) -> str:
    return _key(prefix, "candidate", collection)


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _load(redis: Redis, key: str) -> Experiment | None:
    raw = {_text(k): _text(v) for k, v in redis.hgetall(key).items()}
    if not raw.get("id"):
        return None
    state = raw["state"]
    if state not in ("running", "switch", "drop"):
        raise ExperimentError(f"{key} holds an unknown state {state!r}")
    return Experiment(
        id=raw["id"],
        live=raw.get("live", ""),
        candidate=raw.get("candidate", ""),
        share=float(raw.get("share", "0")),
        state=state,  # type: ignore[arg-type]  # checked above
        started_at=float(raw.get("started_at", "0")),
        ended_at=float(raw.get("ended_at", "0") or 0),
        ended_by=raw.get("ended_by", ""),
        reason=raw.get("reason", ""),
        **{name: int(raw.get(name, "0")) for name in ("impressions", "wins", "losses", "ties")},
    )


def current(redis: Redis, prefix: str) -> Experiment | None:
    """The latest experiment, running or ended; None: none was ever started."""
    latest = _text(redis.get(_key(prefix, "current")))
    return _load(redis, _key(prefix, latest)) if latest else None


def running(redis: Redis, prefix: str) -> Experiment | None:
    """The experiment running now, if any."""
    found = current(redis, prefix)
    return found if found is not None and found.running else None


def get(redis: Redis, prefix: str, experiment_id: str) -> Experiment | None:
    return _load(redis, _key(prefix, experiment_id))


def decision_for(redis: Redis, prefix: str, collection: str) -> State | None:
    """What the latest experiment naming `collection` as its candidate says of it: "running"
    (hold its switch), "switch", "drop"; None: no experiment names it."""
    named = _text(redis.get(_by_candidate(prefix, collection)))
    found = _load(redis, _key(prefix, named)) if named else None
    return found.state if found is not None else None


def start(
    redis: Redis,
    prefix: str,
    *,
    live: str,
    candidate: str,
    share: float,
    now: Callable[[], float] = time.time,
) -> Experiment:
    """Start an experiment of `candidate` against `live` on `share` of text searches.

    Raises:
        ExperimentError: another is running, the share is out of (0, 1], or the candidate is
            the live collection.
    """
    if not 0 < share <= 1:
        raise ExperimentError(f"the share must be above 0 and at most 1, not {share}")
    if candidate == live:
        raise ExperimentError(f"{candidate} is the live collection: it cannot be the candidate")
    experiment_id = uuid.uuid4().hex[:12]
    key = _key(prefix, experiment_id)
    fields = {
        "id": experiment_id,
        "live": live,
        "candidate": candidate,
        "share": repr(share),
        "state": "running",
        "started_at": repr(now()),
    }
    # Checked and started in one step: two admins starting at once get one experiment.
    holder = _text(
        redis.eval(
            _START,
            3,
            _key(prefix, "current"),
            key,
            _by_candidate(prefix, candidate),
            f"{prefix}:experiment:",
            experiment_id,
            *(item for pair in fields.items() for item in pair),
        )
    )
    if holder:
        found = get(redis, prefix, holder)
        assert found is not None
        raise ExperimentError(
            f"experiment {found.id} ({found.candidate} against {found.live}) is running: "
            "end it first (`photosearch experiment end --decision switch|drop`)"
        )
    started = _load(redis, key)
    assert started is not None
    return started


def end(
    redis: Redis,
    prefix: str,
    experiment_id: str,
    decision: Decision,
    *,
    by: str,
    reason: str = "",
    now: Callable[[], float] = time.time,
) -> Experiment:
    """Record the decision of a running experiment; an ended one keeps its first decision.

    Raises:
        ExperimentError: no such experiment, or it ended with another decision already.
    """
    if decision not in DECISIONS:
        raise ExperimentError(f"the decision is switch or drop, not {decision!r}")
    key = _key(prefix, experiment_id)
    state = _text(redis.eval(_END, 1, key, experiment_id, decision, repr(now()), by, reason))
    if not state:
        raise ExperimentError(f"no experiment {experiment_id}")
    if state != decision:
        raise ExperimentError(f"experiment {experiment_id} has ended already, with {state}")
    ended = _load(redis, key)
    assert ended is not None
    return ended


def credit(
    redis: Redis, prefix: str, experiment_id: str, search_id: str, photo_id: str, side: Side
) -> bool:
    """Credit one click of an interleaved search to the side that showed the photo; False
    when it was credited before or the experiment is not running."""
    done = redis.eval(
        _CREDIT,
        3,
        _key(prefix, experiment_id),
        _key(prefix, experiment_id, "clicks"),
        _key(prefix, experiment_id, "search", search_id),
        experiment_id,
        f"{search_id}:{photo_id}",
        side,
        _TALLY_TTL_S,
    )
    return bool(done)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test of wins against losses (ties dropped): the probability of a
    split at least this uneven if either side were as likely to win. 1.0 with no decisive
    impressions."""
    n = wins + losses
    if n == 0:
        return 1.0
    low = min(wins, losses)
    tail = sum(math.comb(n, k) for k in range(low + 1)) / 2**n
    return min(1.0, 2.0 * float(tail))


def verdict(experiment: Experiment, alpha: float) -> Side | None:
    """The side that wins significantly at `alpha`, if either does."""
    if experiment.p_value >= alpha or experiment.wins == experiment.losses:
        return None
    return "candidate" if experiment.wins > experiment.losses else "live"


def auto_decision(experiment: Experiment, *, alpha: float, min_impressions: int) -> Decision | None:
    """ "switch" when the candidate wins significantly over at least `min_impressions`
    impressions; otherwise no decision (a losing candidate is left for an admin to drop)."""
    if not experiment.running or experiment.impressions < min_impressions:
        return None
    return "switch" if verdict(experiment, alpha) == "candidate" else None


def switch_refusal(experiment: Experiment, alpha: float) -> str | None:
    """Why switching to the candidate needs forcing: the live collection wins significantly."""
    if verdict(experiment, alpha) != "live":
        return None
    return (
        f"the live collection wins significantly ({experiment.losses} to {experiment.wins}, "
        f"p = {experiment.p_value:.3g} < {alpha}): switch with force, or drop"
    )


def reindex_of(collection: str, get: Callable[[str], JobStatus | None]) -> JobStatus | None:
    """The reindex that builds (or built) the collection, by the job id its name carries
    (photos-m2-<job id>), also before its worker has named the collection in the record.

    get: a job record by id (`Jobs.get`)."""
    job_id = job_id_of(collection)
    job = get(job_id) if job_id else None
    if job is None or job.kind != JobKind.REINDEX:
        return None
    return job if collection_name(job.model_version, job.id) == collection else None


def candidate_ready(job: JobStatus | None) -> bool:
    """Whether the candidate's searches are fair to compare: its reindex (`reindex_of`) has
    loaded and grouped every photo and keeps it current (catch-up, or its switch); a
    collection that no kept reindex record names is taken as it is."""
    if job is None:
        return True
    return job.state not in (JobState.FAILED, JobState.CANCELLED) and job.phase.follows_live


def go_on(tasks: Celery, jobs: Jobs, candidate: str) -> None:
    """Send the step of the reindex that waits on an ended experiment, so that it switches or
    drops now rather than at the workers' next nudge (the step is idempotent)."""
    job = reindex_of(candidate, jobs.get)
    if job is not None and job.state not in FINISHED:
        send(tasks, FINALIZE, job.id)
