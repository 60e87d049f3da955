"""The quality gate at a reindex's switch: is the new model at least as good for people's
queries as the live one?

The reindex's verification shows that the new collection holds what the live one holds; it
says nothing of how well it ranks. So, once per verified cut, each configured judgement set
(core/quality/judgements.py) is run against both collections, each query embedded with its
own collection's model version and ranked as the API's default search ranks it
(core/quality/runner.py). The switch is refused when the new collection's mean nDCG@10 is
lower than the live one's by more than `max_quality_drop` on any set, unless the job is
forced; a forced job records that it overrode the gate, with the figures. With no set
configured the gate says so and the switch goes on counts, as before the gate. Besides the
sets on disk, the gate may run the set the click model makes of the search log at the switch
(`click_judgements`), so that it reflects the searches people made up to then.

The figures go into the job record as a small JSON document (`quality`): per set, both
collections' nDCG@10, recall@10 and MRR@10 (mean and bootstrap interval) and the paired
difference new - live with its interval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from redis import Redis

from core.embedding.arrays import Embeddings
from core.embedding.manifest import SearchCalibration
from core.feedback import clickmodel
from core.feedback.events import read_events
from core.feedback.searchlog import read_searches
from core.jobstatus import JobStatus
from core.quality.judgements import JudgementError, JudgementSet, Query, load_judgements
from core.quality.metrics import Interval
from core.quality.runner import METRICS, Evaluation, collection_ranker, compare, evaluate
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore, model_version_of

Mode = Literal["hybrid", "vector", "keyword"]
Status = Literal["passed", "refused", "overridden", "unconfigured", "no live collection"]
NOT_CONFIGURED = "no judgement sets configured: switched on counts"
NO_LIVE = "no live collection to compare with: switched on counts"
NO_CLICKS = "no query searched in 3 sessions and clicked yet: not gated on clicks"
K = 10  # the cut-off of every figure (nDCG@10, recall@10, MRR@10)


@dataclass(frozen=True)
class SetFigures:
    """One judgement set run against both collections: their evaluations and the paired
    difference new - live of each metric."""

    name: str
    live: Evaluation
    new: Evaluation
    difference: dict[str, Interval]

    def drop(self) -> float:
        """How far the new collection's mean nDCG@10 falls below the live one's (< 0: rises)."""
        return self.live.ndcg.mean - self.new.ndcg.mean


@dataclass(frozen=True)
class Verdict:
    """What the gate found: the job record's `quality` document, and why the switch is
    refused (None: it may go on)."""

    record: dict[str, Any]
    refusal: str | None = None

    @property
    def status(self) -> Status:
        found: Status = self.record["status"]
        return found

    def to_json(self) -> str:
        return json.dumps(self.record, separators=(",", ":"))


def _figures(evaluation: Evaluation) -> dict[str, dict[str, float]]:
    return {metric: evaluation.metric(metric).to_dict(4) for metric in METRICS}


def measure(
    judgements: JudgementSet,
    *,
    live: str,
    new: str,
    rank: Callable[[str], Callable[[Query], Sequence[str]]],
    mode: Mode,
    samples: int = 1000,
    seed: int = 0,
) -> SetFigures:
    """Run one set against the live and the new collection (`rank(collection)`: its ranking
    of a query), with the same bootstrap draws for both (seeded)."""

    def run(collection: str) -> Evaluation:
        return evaluate(
            judgements,
            rank(collection),
            collection=collection,
            mode=mode,
            samples=samples,
            seed=seed,
        )

    before, after = run(live), run(new)
    return SetFigures(judgements.name, before, after, compare(before, after))


def decide(
    found: Sequence[SetFigures],
    *,
    live: str,
    new: str,
    mode: Mode,
    max_drop: float,
    force: bool,
) -> Verdict:
    """The gate's decision on the sets' figures: refused when nDCG@10 falls by more than
    max_drop on any set, unless forced (then "overridden", the figures kept)."""
    # The epsilon: a drop of exactly max_drop, computed in floats, is within it.
    failing = [s for s in found if s.drop() > max_drop + 1e-9]
    sets = [
        {
            "name": s.name,
            "queries": len(s.new.per_query),
            "live": _figures(s.live),
            "new": _figures(s.new),
            "difference": {metric: s.difference[metric].to_dict(4) for metric in METRICS},
            "failed": s in failing,
        }
        for s in found
    ]
    why = "; ".join(
        f"on {s.name} nDCG@{K} {s.live.ndcg.mean:.3f} -> {s.new.ndcg.mean:.3f} "
        f"(paired difference {s.difference['ndcg']})"
        for s in failing
    )
    limit = f"by more than max_quality_drop={max_drop:g}"
    if not failing:
        status: Status = "passed"
        message = f"quality gate passed: nDCG@{K} falls {limit} on none of {len(found)} sets"
    elif force:
        status, message = "overridden", f"quality gate overridden (forced): {why}"
    else:
        status, message = "refused", f"refused by the quality gate: {why}"
    record = {
        "status": status,
        "message": message,
        "mode": mode,
        "max_drop": max_drop,
        "live": {"collection": live, "model_version": model_version_of(live)},
        "new": {"collection": new, "model_version": model_version_of(new)},
        "sets": sets,
    }
    if status != "refused":
        return Verdict(record)
    return Verdict(
        record,
        f"refused by the quality gate: nDCG@{K} of {new} falls {limit} below the live "
        f"{live}'s: {why}. {LIVE_ALIAS} still points at {live}. If the new model is right "
        f"(a judgement set out of date, say), run the reindex again forced: `photosearch index "
        f"reindex --model-version {model_version_of(new)} --force`, or `force: true` in POST "
        f"/v1/admin/reindex (`photosearch index drop {new}` frees this one).",
    )


def load_sets(paths: Sequence[str]) -> list[JudgementSet]:
    """The judgement sets of the settings' folders; JudgementError names the bad file."""
    return [load_judgements(Path(path)) for path in paths]


def judge(
    job: JobStatus,
    *,
    store: VectorStore,
    paths: Sequence[str],
    embed: Callable[[Sequence[str], int], Embeddings],
    mode: Mode,
    max_drop: float,
    clicks: Callable[[], JudgementSet] | None = None,
    calibration: Callable[[int], SearchCalibration | None] = lambda version: None,
    samples: int = 1000,
    seed: int = 0,
) -> Verdict:
    """The gate for a reindex's collection against the live one, on the judgement sets in
    `paths` and, when `clicks` is given, the set it makes of the search log's clicks (one
    without a query is left out, said in the record); `embed(texts, version)` embeds
    queries at a model version (Triton's), `calibration(version)` is the version's search
    calibration (its manifest's), with which a hybrid ranking is fused as the API fuses it."""

    def unchecked(status: Status, message: str) -> Verdict:
        return Verdict({"status": status, "message": message, "mode": mode, "sets": []})

    if not paths and clicks is None:
        return unchecked("unconfigured", NOT_CONFIGURED)
    try:
        live = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        return unchecked("no live collection", NO_LIVE)
    try:
        sets = load_sets(paths)
    except JudgementError as exc:
        # A gate that cannot read its sets cannot say the new model is as good: closed,
        # unless forced.
        message = f"quality gate: a judgement set cannot be read: {exc}"
        if job.force:
            return unchecked("overridden", f"{message} (forced: switched on counts)")
        return Verdict(
            {"status": "refused", "message": message, "mode": mode, "sets": []},
            f"refused: {message}. Fix PHOTOSEARCH_INDEXER__JUDGEMENTS, or run the reindex "
            "again forced (`photosearch index reindex --force`).",
        )

    notes = []
    if clicks is not None:
        made = clicks()
        if made.queries:
            sets.append(made)
        else:
            notes.append(f"{made.name}: {NO_CLICKS}")
    if not sets:
        return unchecked("unconfigured", "; ".join([*notes, NOT_CONFIGURED]))

    def rank(collection: str) -> Callable[[Query], Sequence[str]]:
        fused = calibration(model_version_of(collection))
        return collection_ranker(store, collection, embed=embed, mode=mode, k=K, calibration=fused)

    found = [
        measure(s, live=live, new=job.collection, rank=rank, mode=mode, samples=samples, seed=seed)
        for s in sets
    ]
    verdict = decide(
        found, live=live, new=job.collection, mode=mode, max_drop=max_drop, force=job.force
    )
    if notes:
        verdict.record["notes"] = notes
    return verdict


def click_judgements(
    redis: Redis, prefix: str, *, retention_s: int, now: Callable[[], float] = time.time
) -> JudgementSet:
    """The judgement set the click model (core/feedback/clickmodel.py) makes of the search
    log and its events kept in `redis` within the retention: what `photosearch judgements
    from-clicks` writes, read at the gate so that it reflects the searches up to the switch."""
    at = now()
    since = at - retention_s
    records = list(read_searches(redis, prefix, since=since, now=at, ttl_s=retention_s))
    events = list(read_events(redis, prefix, since=since, now=at, retention_s=retention_s))
    return clickmodel.judgements(records, events, name="clicks")
