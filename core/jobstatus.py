"""What a job is: its kind, state and phase, and its record as `photosearch index status`, the
admin API and the workers read it (core/jobs.py keeps it in Redis)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class JobKind(StrEnum):
    SYNC = "sync"  # list the whole source (the weekly reconciliation, or nightly without a feed)
    INCREMENT = "increment"  # the changes the feed reported since the last one
    REINDEX = "reindex"
    ROLLBACK = "rollback"


class JobState(StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    RUNNING = "running"
    FINALIZING = "finalizing"
    # A dependency (Triton, Redis, the store) stayed down past the retry budget: the job keeps
    # its locks and its work, and goes on by itself once the dependency answers.
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    # Ended by an operator; a reindex keeps its work to be resumed (`index reindex --resume`).
    CANCELLED = "cancelled"


FINISHED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class JobPhase(StrEnum):
    """Where a reindex or a rollback stands within its running states. The record keeps the
    value: a record written by an earlier release, whose phase was a plain string, reads back
    as the same member."""

    NONE = ""
    LOAD = "load"
    INDEXING = "indexing"
    GROUPING = "grouping"
    CATCH_UP = "catch-up"
    SWITCH = "switch"
    REPLAY = "replay"

    @property
    def follows_live(self) -> bool:
        """The new collection holds every photo and is kept current: fair to search."""
        return self in (JobPhase.CATCH_UP, JobPhase.SWITCH)


# What each phase does, in order: the API's description of a job's phase and the table of
# docs/operating/model-update.md are written from it, so neither misses one.
PHASES: dict[JobPhase, str] = {
    JobPhase.NONE: "a sync or an increment; a reindex that has not started its load yet",
    JobPhase.LOAD: "a reindex's round 0: every shard of the source into the new collection",
    JobPhase.INDEXING: "its search index built (a Qdrant server defers it during the load)",
    JobPhase.GROUPING: "round 1: near-duplicate groups over the whole new collection",
    JobPhase.CATCH_UP: "replay rounds of the live side's changes, until few enough wait",
    JobPhase.SWITCH: "the live lock held: the last replay, then the aliases' move",
    JobPhase.REPLAY: "a rollback: the previous collection brought level before its swap",
}


_INTS = (
    *("listed", "total", "done", "failed", "skipped", "deleted", "updated", "unchanged"),
    *("batches_total", "batches_done", "model_version", "round", "changes"),
    *("shards_total", "shards_planned", "live_count", "delete_budget", "held"),
    "regrouped",
    *("lag", "lag_shards", "capture_cut", "replayed", "verified_cut", "warmed"),
    *("repaired", "repair_rounds"),
)
_BOOLS = ("force", "refused", "dropped")
_FLOATS = (
    *("created_at", "started_at", "finished_at", "lag_oldest_at", "paused_at"),
    *("locked_at", "lock_s"),
)


@dataclass
class JobStatus:
    """One job as `photosearch index status` shows it."""

    id: str
    kind: JobKind
    state: JobState
    source: str = ""
    collection: str = ""
    model_version: int = 0
    phase: JobPhase = JobPhase.NONE
    listed: int = 0  # photos listed so far (the catalogue known)
    total: int = 0  # photos to embed or skip, known so far
    done: int = 0
    failed: int = 0
    skipped: int = 0
    deleted: int = 0
    updated: int = 0
    unchanged: int = 0
    batches_total: int = 0
    batches_done: int = 0
    shards_total: int = 0  # of the round (grows while big shards are split)
    shards_planned: int = 0
    # A reindex: 0 the load, 1 the grouping pass, then catch-up passes; a sync: 1 its held
    # shards.
    round: int = 0
    changes: int = 0  # of the round: embedded, updated or deleted photos it planned
    # The delete guard (indexer/plan/deleteguard.py): the live index's size when the job started,
    # the deletions it may make, those held back until the whole listing was seen; forced
    # past it, or refused by it.
    live_count: int = 0
    delete_budget: int = 0
    held: int = 0
    # A reindex's grouping pass: photos it moved to another near-duplicate group than the
    # load's batches gave them.
    regrouped: int = 0
    # A reindex's change capture (indexer/queue/capture.py): changes of the live side waiting to be
    # replayed into its collection (keys, whole shards), the oldest one's time, the Redis time
    # up to which the running replay round reads, and the keys replayed so far.
    lag: int = 0
    lag_shards: int = 0
    lag_oldest_at: float = 0.0
    capture_cut: int = 0
    replayed: int = 0
    # The switch: the cut whose catch-up was verified, the queries pre-warmed, when it took
    # the live lock and how long it held it.
    verified_cut: int = 0
    warmed: int = 0
    # The verification's repairs (indexer/jobs/verify.py): differences the source explained,
    # replayed before it verified again, and in how many rounds.
    repaired: int = 0
    repair_rounds: int = 0
    # The quality gate (indexer/jobs/quality_gate.py) at the verified cut: the live and the new
    # collection's figures on each judgement set and its decision, as JSON (a few hundred
    # bytes a set); "" before it ran.
    quality: str = ""
    locked_at: float = 0.0
    lock_s: float = 0.0
    # A paused job: since when, and the state it goes back to.
    paused_at: float = 0.0
    resume_state: str = ""
    force: bool = False
    refused: bool = False
    # A failed or cancelled reindex whose collection `index drop` deleted: it resumes no more,
    # and holds no room for a new reindex.
    dropped: bool = False
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    message: str = ""

    @property
    def processed(self) -> int:
        return self.done + self.failed + self.skipped

    @property
    def planning(self) -> bool:
        return self.shards_planned < self.shards_total

    @property
    def estimated_total(self) -> int:
        """total, extrapolated from the shards planned while planning goes on (shards are of
        about one size)."""
        if not self.planning or not self.shards_planned:
            return self.total
        return max(self.total, round(self.total * self.shards_total / self.shards_planned))

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
        return max(0.0, self.estimated_total - self.processed) / rate if rate > 0 else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["images_per_s"] = round(self.images_per_s, 2)
        data["eta_s"] = None if self.eta_s is None else round(self.eta_s, 1)
        data["estimated_total"] = self.estimated_total
        data["quality"] = json.loads(self.quality) if self.quality else None
        return data


def job_status(data: dict[str, Any]) -> JobStatus:
    """A job's record from its fields as Redis keeps them (strings) or as the API answers them
    (JSON values): a field the record lacks takes its default, one it has beyond them is left,
    and its kind, state and phase are read as their enums."""
    known = {k: v for k, v in data.items() if k in JobStatus.__dataclass_fields__}
    for name in _INTS:
        known[name] = int(known.get(name) or 0)
    for name in _FLOATS:
        known[name] = float(known.get(name) or 0.0)
    for name in _BOOLS:
        known[name] = known.get(name) in (True, "1", "True")
    known["kind"] = JobKind(known["kind"])
    known["state"] = JobState(known["state"])
    known["phase"] = JobPhase(known.get("phase") or "")
    return JobStatus(**known)


def phases_table() -> str:
    """The table of a job's phases for docs/operating/model-update.md."""
    rows = [f"| `{phase.value or '(none)'}` | {what} |" for phase, what in PHASES.items()]
    return "\n".join(["| phase | what the job does |", "|---|---|", *rows])
