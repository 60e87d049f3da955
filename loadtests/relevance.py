"""How well the API's rankings find what a judgement set says each query's photos show: each
mode's ranking, asked of the API, measured at 10 with core/quality's metrics and bootstrap
intervals, beside a random order of the same photos (loadtests/bench_search.py runs the API).

The truth is the set's judgements (core/quality/sets/demo: what the demo photos show;
model/judgements/synthetic: what the synthetic photos were drawn with), never the words the
keyword ranking matches, so no mode is favoured by how relevance is defined."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from core.embedding.manifest import ModelManifest
from core.quality.judgements import JudgementSet, Query
from core.quality.runner import Evaluation, Mode, evaluate
from core.settings import Settings
from core.sources import open_source
from indexer.plan.catalog import read_catalog
from loadtests.openloop import search_target
from query_api.search.ranking import RRF_K

AT = 10  # nDCG@10, recall@10, MRR@10
CHANCE = "random order (chance)"
CHANCE_SEED = 0
ORDER: tuple[Mode, ...] = ("keyword", "vector", "hybrid")  # single rankings, then their fusion

Ranker = Callable[[Query], Sequence[str]]


def api_ranker(http: httpx.Client, mode: Mode) -> Ranker:
    """A query's first AT photo ids as the API ranks them in `mode` (collapse=false: the
    ranking itself, not the near-duplicate grouping)."""

    def rank(query: Query) -> list[str]:
        params = {"mode": mode, "collapse": "false", "limit": AT}
        answer = http.get(search_target(query.text, **params)).raise_for_status()
        return [str(r["id"]) for r in answer.json()["results"]]

    return rank


def chance_ranker(photo_ids: Sequence[str], seed: int = CHANCE_SEED) -> Ranker:
    """AT of the photos in a random order, drawn anew for each query (seeded): the level a
    ranking that knows nothing reaches on this set."""
    r = random.Random(seed)
    ids = sorted(photo_ids)

    def rank(query: Query) -> list[str]:
        return r.sample(ids, min(AT, len(ids)))

    return rank


def evaluations(
    judgements: JudgementSet,
    rankers: dict[str, tuple[Mode, Ranker]],
    *,
    collection: str,
    samples: int,
    seed: int,
) -> dict[str, Evaluation]:
    """Each named ranking of the set's queries, measured at AT with bootstrap intervals."""
    return {
        name: evaluate(
            judgements, rank, collection=collection, mode=mode, samples=samples, seed=seed, k=AT
        )
        for name, (mode, rank) in rankers.items()
    }


def rankers(
    http: httpx.Client, photo_ids: Sequence[str], hybrid: str
) -> dict[str, tuple[Mode, Ranker]]:
    """The API's three modes (the hybrid row named `hybrid`: the fusion it uses) and chance."""
    names = {"keyword": "keyword (API)", "vector": "vector (API)", "hybrid": hybrid}
    made: dict[str, tuple[Mode, Ranker]] = {names[m]: (m, api_ranker(http, m)) for m in ORDER}
    made[CHANCE] = ("vector", chance_ranker(photo_ids))  # a mode evaluate records, unused here
    return made


def photo_ids(folder: Path, settings: Settings) -> list[str]:
    """The ids the indexer gives the folder's photos: the chance ranking draws from them."""
    catalog = read_catalog(open_source(str(folder), settings), settings.indexer.metadata_files)
    return [photo.photo_id for photo in catalog.photos.values()]


def fusion_name(manifest: ModelManifest) -> str:
    """The hybrid row: the fusion the API uses with this version (query_api.search.hybrid)."""
    c = manifest.calibration
    k, weight = (RRF_K, 1.0) if c is None else (c.rrf_k, c.keyword_weight)
    return f"hybrid (API: RRF k={k}, keyword weight {weight:g})"


def relevance_table(found: dict[str, Evaluation]) -> str:
    """| ranking | nDCG@10 | recall@10 | MRR@10 |, each a mean over the queries [95% interval]."""
    lines = [
        f"| ranking | queries | nDCG@{AT} | recall@{AT} | MRR@{AT} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, e in found.items():
        lines.append(f"| {name} | {len(e.per_query)} | {e.ndcg} | {e.recall} | {e.mrr} |")
    return "\n".join(lines)
