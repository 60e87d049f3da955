"""A reindex job's tasks run in this process, one at a time, without Celery or Triton: the
plan units and each round's steps as the workers run them (indexer/tasks.py), the embedding
replaced by synthetic clustered vectors. For benchmarks of the indexer's phases at scale."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from core.embedding.arrays import Embeddings
from core.jobstatus import JobKind
from core.vectorstore import collection_name
from indexer.jobs.reindex import loading, open_load
from indexer.jobs.units import commit, plan_unit
from indexer.photo.writer import write_points
from indexer.plan.planner import Planned
from indexer.queue.messages import GroupUnit, UnitKind
from indexer.rounds import PLAN_AHEAD
from indexer.runtime import Runtime

WORKER = "bench"


# -- the embedding, replaced ----------------------------------------------------------------


def unit_rows(vectors: Embeddings) -> Embeddings:
    normed: Embeddings = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normed


class Clustered:
    """Synthetic embeddings: unit vectors around random centres (cosine ~0.7 within a cluster,
    as real embeddings cluster: uniformly random ones are HNSW's worst case), 1% of them a
    near-duplicate (cosine > 0.99) of one of the last few thousand."""

    def __init__(self, dim: int, clusters: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.dim = dim
        self.centres = unit_rows(self.rng.standard_normal((clusters, dim), dtype=np.float32))
        self.recent = np.zeros((4096, dim), dtype=np.float32)
        self.seen = 0

    def noise(self, n: int, scale: float) -> Embeddings:
        values: Embeddings = self.rng.standard_normal((n, self.dim), dtype=np.float32) * scale
        return values

    def take(self, n: int) -> Embeddings:
        picked = self.centres[self.rng.integers(0, len(self.centres), n)]
        vectors = unit_rows(picked + self.noise(n, 0.03))
        copies = np.flatnonzero(self.rng.random(n) < 0.01)
        if self.seen and len(copies):
            originals = self.recent[
                self.rng.integers(0, min(self.seen, len(self.recent)), len(copies))
            ]
            vectors[copies] = unit_rows(originals + self.noise(len(copies), 0.002))
        slots = (self.seen + np.arange(n)) % len(self.recent)
        self.recent[slots] = vectors
        self.seen += n
        return vectors


# -- the job's tasks, in this process -------------------------------------------------------------


class Worker:
    """One task at a time over a job's work queue: what the plan and embed_batch tasks call
    (indexer/tasks.py), without Celery; the embedding is `vectors`. group_shards: plan only
    that many units of a grouping round, committing the others with an empty record."""

    def __init__(self, rt: Runtime, vectors: Clustered, group_shards: int = 0) -> None:
        self.rt, self.vectors, self.group_shards = rt, vectors, group_shards
        self.grouped = self.sampled_out = 0
        # Seconds in each kind of call: plan_shard, group_shard, plan_keys, the writes.
        self.busy: dict[str, float] = defaultdict(float)

    def round(self, job_id: str, *, plan_only: bool = False) -> None:
        """Run the job's round until it ends; plan_only: plan every unit, embed nothing yet
        (the batches wait in Redis)."""
        s = self.rt.settings.indexer
        while True:
            tokens = self.rt.work.reserve(
                job_id,
                max_embed=0 if plan_only else s.max_queued_batches,
                max_plan=s.planners,
                plan_ahead=2**31 if plan_only else PLAN_AHEAD * s.max_queued_batches,
                ttl_s=s.visibility_timeout_s,
                lease_s=s.lease_s,
            )
            if tokens.round_ended:
                return
            if not tokens.plan and not tokens.embed:
                if plan_only:
                    return
                raise RuntimeError(f"job {job_id}: its round has work but no token to take it")
            ended = False
            for token in tokens.plan:
                ended = self.plan(job_id, token) or ended
            for token in tokens.embed:
                ended = self.embed(job_id, token) or ended
            if ended:
                return

    def plan(self, job_id: str, token: str) -> bool:
        rt = self.rt
        unit = rt.work.claim_unit(job_id, token)
        job = rt.jobs.get(job_id)
        if unit is None or job is None:
            return rt.work.release(job_id, token)
        started = time.perf_counter()
        if isinstance(unit, GroupUnit) and 0 < self.group_shards <= self.grouped:
            # Its time is extrapolated from the shards grouped.
            planned = Planned({"label": unit.shard.lo, "sampled_out": True})
            self.sampled_out += 1
        else:
            planned = plan_unit(rt, job, unit, WORKER)
            kind = {UnitKind.REPLAY: "plan_keys", UnitKind.GROUP: "group_shard"}
            self.busy[kind.get(unit.kind, "plan_shard")] += time.perf_counter() - started
            self.grouped += isinstance(unit, GroupUnit)
        return commit(rt, job_id, token, unit.id, planned)

    def embed(self, job_id: str, token: str) -> bool:
        rt = self.rt
        claimed = rt.work.claim_batch(job_id, token)
        if claimed is None:
            return rt.work.release(job_id, token)
        job = rt.jobs.get(job_id)
        if claimed.body is None or job is None:
            return rt.work.complete(job_id, token, claimed.id, {})
        started = time.perf_counter()
        photos = claimed.body.photos
        write_points(
            rt.store,
            job.collection,
            rt.source(job.source),
            job.model_version,
            photos,
            self.vectors.take(len(photos)),
            duplicate_threshold=rt.settings.indexer.duplicate_threshold,
            group_with_stored=not loading(job),
        )
        done = [photo.key for photo, _ in photos]
        rt.skips.forget(job.collection, done)
        self.busy["writes"] += time.perf_counter() - started
        return rt.work.complete(job_id, token, claimed.id, {"done": len(done)})


def begin_reindex(rt: Runtime, root: Path, dim: int) -> tuple[str, str]:
    """A reindex job into a new collection, opened as `start_reindex` opens it (without
    asking Triton for the model: none runs here)."""
    job_id = rt.jobs.create(JobKind.REINDEX, source=str(root), model_version=2)
    collection = collection_name(2, job_id)
    open_load(job_id, collection, dim, str(root), store=rt.store, records=rt.records)
    return job_id, collection
