"""The indexer's settings (PHOTOSEARCH_INDEXER__*): its source and schedules, batches and
retries, a reindex's checks and gate, near-duplicates and tags; a part of the one tree in
core/settings.py, apart only for its size."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

__all__ = ["IndexerSettings"]


class IndexerSettings(BaseModel):
    """The Celery indexer: batches, retries, the nightly sync and the reindex checks."""

    source: str | None = Field(
        None,
        description="The photo catalog (file:///dir or s3://bucket/prefix) the nightly "
        "sync and a reindex read; `index sync --source` overrides and is remembered.",
    )
    sync_cron: str = Field(
        "0 2 * * *",
        description="When beat runs the nightly job (cron): the increment when a feed is set, "
        "else a full sync.",
    )
    feed: str | None = Field(
        None,
        pattern=r"^(sqs\+https?|file)://",
        description="Change feed of the nightly increment: sqs+https://QUEUE-URL (the S3 "
        "bucket's event notifications) or file:///journal (a folder's changed keys, one per "
        "line); unset: every nightly job lists the whole source.",
    )
    reconcile_cron: str = Field(
        "0 3 * * 0",
        description="With a feed: when beat runs the full sync that catches what the feed "
        "missed (cron; weekly).",
    )
    popularity_cron: str | None = Field(
        "30 1 * * *",
        description="When beat counts each photo's popularity from the search feedback "
        "events (cron; before the nightly job, which writes the changed ones); unset: only "
        "`photosearch feedback popularity` does.",
    )
    feed_chunk: int = Field(
        1000, ge=1, le=100_000, description="Changes one increment planning step takes."
    )
    feed_read_s: float = Field(
        60.0,
        gt=0,
        description="Seconds one increment planning step reads an SQS feed at most; the "
        "next step reads on. Below visibility_timeout_s (checked at start with an SQS feed).",
    )
    shard_size: int = Field(
        10_000,
        ge=10,
        description="Photos per shard of the catalogue: what one planning task lists and "
        "holds (a shard past twice this is split).",
    )
    max_queued_batches: int = Field(
        8,
        ge=1,
        le=100,
        description="Embedding batches of one job waiting in the broker at once, at most; "
        "more are planned as they complete.",
    )
    planners: int = Field(
        8, ge=1, le=64, description="Shards of one job planned at once, at most (plan tasks)."
    )
    model_version: int | None = Field(
        None, ge=1, description="Version the first index is built with; unset: the newest."
    )
    batch_size: int = Field(64, ge=1, le=64, description="Photos per embedding task.")
    concurrency: int = Field(
        2, ge=1, description="Tasks a worker runs at once (threads), so decoding overlaps Triton."
    )
    read_threads: int = Field(8, ge=1, description="Threads reading and decoding one batch.")
    # read_threads x concurrency decodes can run at once: five 10950x10950 PNGs (480 MB each
    # decoded) took a worker from 1.15 to 3.78 GB. The default holds the largest photo
    # max_pixels lets in (120 MP RGBA, ~0.6 GB at its peak) within the worker pod's 4 GiB.
    decode_memory_mb: int = Field(
        1024,
        ge=16,
        description="Decoded pixels a worker process's reader threads may hold at once; a "
        "photo needing more than all of it is skipped with its reason, others wait their turn.",
    )
    # On CPU one image takes ~50 ms on 2 idle cores: a 64-photo request held the image model
    # ~3 s, and a search queued behind it too. Now a search waits for the execution running
    # (the worker's two threads' chunks at most: 8 images) and shares its own with at most one
    # queued chunk (5 images): ~0.65 s idle, inside its 5 s deadline even with the cores 3-4x
    # oversubscribed, as on our shared 2-core machine (chunks of 8 were not).
    cpu_chunk: int = Field(
        4,
        ge=1,
        le=64,
        description="Photos per Triton request when the model runs on the CPU target, so a "
        "search waits for at most about one such chunk (a GPU target takes the whole batch).",
    )
    # A dependency's outage is ridden out, not counted against the photos: 240 retries at the
    # 15 s cap keep a batch alive through about an hour of Triton, store or Redis downtime,
    # and the cap bounds how long work waits once the dependency is back.
    max_retries: int = Field(
        240, ge=0, description="Retries of a batch on Triton/Qdrant/Redis errors (about 1 h)."
    )
    retry_backoff_max_s: int = Field(
        15, ge=1, description="Cap of the exponential backoff (1, 2, 4, 8, 15, 15... s)."
    )
    visibility_timeout_s: int = Field(
        3600, ge=1, description="Redelivery of a task whose worker died (longer than any task)."
    )
    lease_s: float = Field(
        10.0,
        gt=0,
        description="Lease of a task's claim and of a lock: renewed by its live worker every "
        "third of it, taken back this long after its worker died or the queue's Redis lost it.",
    )
    metadata_files: tuple[str, ...] = Field(
        ("photos.jsonl", "photos.csv"), description="Metadata manifests looked for at the root."
    )
    capture_shard_keys: int = Field(
        5000,
        ge=1,
        description="Reindex and rollback: changed keys logged per shard for a following "
        "collection before that shard is logged whole (replayed by listing it).",
    )
    switch_lag: int = Field(
        1000,
        ge=0,
        description="Reindex: at most this many changes may wait to be replayed when the "
        "switch takes the live lock; more are replayed first without it.",
    )
    verify_samples: int = Field(
        5,
        ge=0,
        description="Reindex: shards whose keys and versions are compared with the live "
        "collection (besides every shard whose count differs) before switching.",
    )
    verify_repairs: int = Field(
        3,
        ge=0,
        description="Reindex: rounds of repair before the switch. A difference with the live "
        "collection that the source explains (the source changed a key after its listing, "
        "unannounced) is replayed and verified again, up to this many times; differences "
        "still found after them fail the job, as one the source does not explain does at once.",
    )
    rollback_days: int = Field(
        7,
        ge=0,
        description="After a switch, the previous collection receives every change this long: "
        "a rollback within it is current; past it the rollback is refused.",
    )
    job_ttl_days: int = Field(30, ge=1, description="How long job records are kept.")
    max_delete_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="A sync, increment or reindex that would delete more than this share of "
        "the live index is refused (nothing past the share is deleted) unless forced "
        "(`--force`, `force: true`).",
    )
    judgements: tuple[str, ...] = Field(
        (),
        description="Reindex: judgement set folders (queries.tsv and qrels.txt) on which the "
        "quality gate compares the new collection with the live one before the switch "
        "(a JSON list in the environment: '[\"/srv/judgements/curated\"]'); none: the switch "
        "goes on counts alone.",
    )
    max_quality_drop: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Reindex: the quality gate refuses the switch when the new collection's "
        "nDCG@10 is lower than the live one's by more than this (absolute) on any judgement "
        "set, unless forced (`--force`, `force: true`).",
    )
    click_judgements: bool = Field(
        False,
        description="Reindex: the quality gate also runs the judgement set the click model "
        "makes of the search log's clicks within PHOTOSEARCH_API__FEEDBACK_RETENTION_DAYS "
        "(what `photosearch judgements from-clicks` writes), read at the switch.",
    )
    quality_mode: Literal["hybrid", "vector", "keyword"] = Field(
        "hybrid",
        description="Reindex: the search mode the quality gate ranks with (hybrid: the "
        "default search's).",
    )
    # loadtests/bench_duplicates.py: the lowest threshold at which the indexer's grouping of
    # the demo photos and their altered copies put no two different photos in one group
    # (hiding a distinct photo in search is worse than showing a copy). Measured on ViT-B-32
    # with random weights (none can be downloaded here): there only JPEG re-encodings and
    # downscales stay above it, crops, flips, rotations mostly fall below; run it on the real
    # weights' export (--repository) to set this for them.
    duplicate_threshold: float = Field(
        0.99,
        gt=0,
        le=1,
        description="Cosine similarity of two photos' image embeddings at or above which a "
        "photo written joins its nearest neighbour's near-duplicate group (the searches "
        "collapse a group into one result).",
    )
    tag_vocabulary: Path | None = Field(
        None,
        description="Automatic tags: the vocabulary file (one tag a line, '#' comments); "
        "unset: the shipped stock-photo vocabulary. Read at every job step: a changed file "
        "re-tags every photo at the next sync, from its stored vector.",
    )
    auto_tags: bool = Field(
        True,
        description="Store automatic tags from each photo's image embedding, for model "
        "versions whose manifest has an enabled tag calibration (`photosearch model "
        "calibrate-tags`); false: none are stored.",
    )
    metrics_host: str = Field(
        "127.0.0.1",
        description="`photosearch worker`: address of its Prometheus listener (0.0.0.0 in a "
        "container, where Prometheus scrapes it over the network).",
    )
    metrics_port: int = Field(
        9464, ge=0, le=65535, description="`photosearch worker`: Prometheus port; 0: none."
    )

    @model_validator(mode="after")
    def _feed_read_within_the_hold(self) -> IndexerSettings:
        # A read holds the SQS messages it takes invisible for visibility_timeout_s: a read
        # that lasted longer would see its first messages again, delivered twice.
        sqs = self.feed is not None and self.feed.startswith("sqs+")
        if sqs and self.feed_read_s >= self.visibility_timeout_s:
            raise ValueError(
                f"PHOTOSEARCH_INDEXER__FEED_READ_S ({self.feed_read_s:g} s) must be below "
                f"PHOTOSEARCH_INDEXER__VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s} s): "
                "an SQS feed's messages stay hidden that long once read, and would come back "
                "to the same read before it ended"
            )
        return self
