"""What the admin routes accept and answer: sync, reindex and rollback jobs, collections,
near-duplicate groups (a key with the admin scope)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from core.jobstatus import PHASES
from query_api.schemas.search import MAX_DUPLICATE_IDS

# The examples of the OpenAPI schema (the documentation's API reference shows them).
_GROUP_EXAMPLE: dict[str, Any] = {
    "group": "2024/06/red-bicycle.jpg",
    "size": 3,
    "ids": [
        "2024/06/red-bicycle.jpg",
        "2024/06/red-bicycle-crop.jpg",
        "2024/06/red-bicycle-small.jpg",
    ],
}
_JOB_EXAMPLE: dict[str, Any] = {
    "id": "3f9c2a1b7d4e",
    "kind": "reindex",
    "state": "running",
    "source": "s3://photostock/catalogue",
    "collection": "photos-m2-3f9c2a1b7d4e",
    "model_version": 2,
    "phase": "catch-up",
    "round": 2,
    "listed": 1000000,
    "shards_total": 100,
    "shards_planned": 100,
    "estimated_total": 1000000,
    "total": 1000000,
    "done": 1000000,
    "failed": 0,
    "skipped": 12,
    "deleted": 0,
    "updated": 0,
    "unchanged": 0,
    "images_per_s": 812.5,
    "eta_s": 30.0,
    "created_at": 1717200000.0,
    "started_at": 1717200001.5,
    "finished_at": 0.0,
    "message": "catch-up round 2: 214 changes to replay",
    "force": False,
    "refused": False,
    "live_count": 1000000,
    "delete_budget": 500000,
    "held": 0,
    "regrouped": 1830,
    "dropped": False,
    "quality": {
        "status": "passed",
        "message": "quality gate passed: nDCG@10 falls by more than max_quality_drop=0.01 "
        "on none of 1 sets",
        "mode": "hybrid",
        "max_drop": 0.01,
        "live": {"collection": "photos-m1-1a2b3c4d5e6f", "model_version": 1},
        "new": {"collection": "photos-m2-3f9c2a1b7d4e", "model_version": 2},
        "sets": [
            {
                "name": "curated",
                "queries": 120,
                "live": {
                    "ndcg": {"mean": 0.612, "low": 0.571, "high": 0.652},
                    "recall": {"mean": 0.701, "low": 0.655, "high": 0.744},
                    "mrr": {"mean": 0.655, "low": 0.61, "high": 0.7},
                },
                "new": {
                    "ndcg": {"mean": 0.648, "low": 0.607, "high": 0.689},
                    "recall": {"mean": 0.733, "low": 0.69, "high": 0.775},
                    "mrr": {"mean": 0.69, "low": 0.646, "high": 0.733},
                },
                "difference": {
                    "ndcg": {"mean": 0.036, "low": 0.012, "high": 0.061},
                    "recall": {"mean": 0.032, "low": 0.004, "high": 0.06},
                    "mrr": {"mean": 0.035, "low": 0.006, "high": 0.064},
                },
                "failed": False,
            }
        ],
    },
    "problems": ["2024/06/broken.jpg: cannot identify image file"],
}


class DuplicateGroup(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_GROUP_EXAMPLE]})

    group: str
    size: int = Field(description="Photos in the group.")
    ids: list[str] = Field(description=f"The first {MAX_DUPLICATE_IDS} of their ids.")


class DuplicateGroups(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"groups": [_GROUP_EXAMPLE]}]})

    groups: list[DuplicateGroup] = Field(description="The largest groups first.")


class SourceRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"source": "s3://photostock/catalogue"}]},
    )
    source: str | None = Field(
        None, max_length=2000, description="file:///dir or s3://bucket/prefix; default: the last."
    )
    # Strict: 0.0 or "yes" for a flag that deletes photos is a mistake to refuse, not to guess.
    force: StrictBool = Field(
        False,
        description="Go on even past PHOTOSEARCH_INDEXER__MAX_DELETE_SHARE: a sync that would "
        "delete more than that share of the live index, or a reindex whose switch would drop "
        "it, is refused otherwise (the job says so). A reindex forced also switches past the "
        "quality gate (nDCG@10 more than PHOTOSEARCH_INDEXER__MAX_QUALITY_DROP below the live "
        "collection's on a judgement set); its job records the override and the figures.",
    )


class SyncRequest(SourceRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"source": "file:///srv/photos", "kind": "sync"}, {"kind": "increment"}]
        }
    )

    kind: Literal["sync", "increment"] = Field(
        "sync",
        description="sync: list the whole source; increment: what the change feed reported.",
    )


class ReindexRequest(SourceRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model_version": 2, "source": "s3://photostock/catalogue"}]
        }
    )

    model_version: int = Field(ge=1, description="The exported model version to rebuild with.")


class JobAccepted(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "3f9c2a1b7d4e",
                    "kind": "reindex",
                    "status_url": "/v1/admin/jobs/3f9c2a1b7d4e",
                    "joined": False,
                    "queued": False,
                }
            ]
        }
    )

    job_id: str
    kind: str
    status_url: str
    joined: bool = Field(
        False, description="True: the same job was running (or in line) already; this is that job."
    )
    queued: bool = Field(
        False,
        description="True: another job changes the live collection; this one waits in line "
        "and starts once it has finished (an increment behind a sync).",
    )


class RollbackResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "9a0b1c2d3e4f",
                    "state": "done",
                    "message": "photos -> photos-m1-1a2b3c4d5e6f (model version 1); "
                    "photos-previous -> photos-m2-3f9c2a1b7d4e",
                }
            ]
        }
    )

    job_id: str
    state: Literal["done", "failed", "queued", "running"]
    message: str


class Figure(BaseModel):
    mean: float = Field(description="The mean over the set's queries.")
    low: float = Field(description="The 95% bootstrap interval's low end (seeded).")
    high: float


class Figures(BaseModel):
    ndcg: Figure = Field(description="nDCG@10.")
    recall: Figure = Field(description="recall@10.")
    mrr: Figure = Field(description="MRR@10.")


class GatedSet(BaseModel):
    name: str = Field(description="The judgement set (its folder's name).")
    queries: int = Field(description="Its queries with a relevant photo judged.")
    live: Figures
    new: Figures
    difference: Figures = Field(description="new - live, paired query by query.")
    failed: bool = Field(description="nDCG@10 fell by more than max_quality_drop here.")


class GatedCollection(BaseModel):
    collection: str
    model_version: int


class QualityGate(BaseModel):
    """What the quality gate found at a reindex's verified cut."""

    status: Literal["passed", "refused", "overridden", "unconfigured", "no live collection"] = (
        Field(
            description="passed; refused (the job failed, refused); overridden (forced past "
            "a refusal); unconfigured (no judgement set: switched on counts); no live "
            "collection to compare with."
        )
    )
    message: str
    mode: str = Field(description="The search mode ranked with (INDEXER__QUALITY_MODE).")
    max_drop: float | None = Field(None, description="PHOTOSEARCH_INDEXER__MAX_QUALITY_DROP.")
    live: GatedCollection | None = None
    new: GatedCollection | None = None
    sets: list[GatedSet] = Field(default_factory=list)


class Job(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_JOB_EXAMPLE]})

    id: str
    kind: str
    state: str
    source: str
    collection: str
    model_version: int
    phase: str = Field(
        description="A reindex's or a rollback's phase: "
        + "; ".join(f"'{phase.value}' {what}" for phase, what in PHASES.items())
        + "."
    )
    round: int = Field(
        description="A reindex: 0 the load, 1 the grouping pass, then each catch-up pass."
    )
    listed: int = Field(description="Photos listed so far.")
    shards_total: int = Field(description="Shards of the round (more as big ones are split).")
    shards_planned: int
    estimated_total: int = Field(description="total, extrapolated while shards are planned.")
    total: int
    done: int
    failed: int
    skipped: int
    deleted: int
    updated: int
    unchanged: int
    images_per_s: float
    eta_s: float | None
    created_at: float
    started_at: float
    finished_at: float
    message: str
    force: bool = Field(False, description="Asked with force: no delete guard.")
    refused: bool = Field(
        False,
        description="Refused by the delete guard (failed): the message gives the counts, the "
        "share and how to force it.",
    )
    live_count: int = Field(0, description="Photos of the live index when the guard counted.")
    delete_budget: int = Field(0, description="Deletions the job may make without force.")
    held: int = Field(
        0, description="Deletions held back until the whole listing was seen within the budget."
    )
    regrouped: int = Field(
        0, description="A reindex's grouping pass: photos moved to another near-duplicate group."
    )
    dropped: bool = Field(
        False, description="A failed or cancelled reindex whose collection was dropped."
    )
    quality: QualityGate | None = Field(
        None,
        description="A reindex: the quality gate's figures, the live and the new collection "
        "side by side on each judgement set; null before it ran.",
    )
    problems: list[str] = Field(default_factory=list)


class Collection(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "photos-m2-3f9c2a1b7d4e",
                    "role": "live",
                    "model_version": 2,
                    "dim": 512,
                    "points": 1000000,
                    "aliases": ["photos"],
                    "job_id": "3f9c2a1b7d4e",
                    "job_state": "done",
                    "created_at": 1717200000.0,
                    "age_s": 86400.0,
                }
            ]
        }
    )

    name: str
    role: Literal["live", "previous", "reindex", "failed", "orphan"] = Field(
        description="live and previous: the aliases'; reindex: a reindex in progress builds "
        "it; failed: a failed or cancelled reindex's (resume it or drop it); orphan: no alias "
        "and no job goes on with it."
    )
    model_version: int
    dim: int
    points: int
    aliases: list[str]
    job_id: str = Field(
        description="The job whose record names it (the tag of its name); '' when none is kept."
    )
    job_state: str
    created_at: float | None = Field(description="Its job's creation time, while kept.")
    age_s: float | None = Field(description="Seconds since then.")
