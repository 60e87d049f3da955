"""An evaluation asked for as data (`photosearch eval`), answered by whichever process holds
the store: the command itself, or the worker that owns an embedded store (`indexer.evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from core.embedding.arrays import Embeddings
from core.embedding.manifest import SearchCalibration
from core.quality.judgements import JudgementSet, Query
from core.quality.runner import MODES, Mode, collection_ranker, evaluate, to_dict
from core.vectorstore import KeywordsUnavailable, VectorStore, model_version_of


def set_to_dict(judgements: JudgementSet) -> dict[str, Any]:
    """A judgement set as JSON-able data (a task's argument)."""
    return {
        "name": judgements.name,
        "queries": [[q.id, q.text, list(q.tags)] for q in judgements.queries],
        "qrels": {qid: dict(grades) for qid, grades in judgements.qrels.items()},
    }


def set_from_dict(data: dict[str, Any]) -> JudgementSet:
    queries = tuple(Query(str(i), str(t), tuple(tags)) for i, t, tags in data["queries"])
    qrels = {
        str(qid): {str(p): int(g) for p, g in grades.items()}
        for qid, grades in data["qrels"].items()
    }
    return JudgementSet(str(data["name"]), queries, qrels)


def evaluation_request(
    judgements: Sequence[JudgementSet],
    collections: Sequence[str],
    modes: Sequence[Mode],
    *,
    samples: int = 1000,
    seed: int = 0,
    k: int = 10,
) -> dict[str, Any]:
    """What `answer` takes: every set, on every collection, in every mode."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}: choose from {', '.join(MODES)}")
    return {
        "judgements": [set_to_dict(j) for j in judgements],
        "collections": list(collections),
        "modes": list(modes),
        "samples": samples,
        "seed": seed,
        "k": k,
    }


def _remembered(
    embed: Callable[[Sequence[str], int], Embeddings],
) -> Callable[[Sequence[str], int], Embeddings]:
    """`embed`, each text embedded once per version however many modes and sets ask."""
    seen: dict[tuple[tuple[str, ...], int], Embeddings] = {}

    def remembered(texts: Sequence[str], version: int) -> Embeddings:
        key = (tuple(texts), version)
        if key not in seen:
            seen[key] = embed(texts, version)
        return seen[key]

    return remembered


def answer(
    request: dict[str, Any],
    *,
    store: VectorStore,
    embed: Callable[[Sequence[str], int], Embeddings],
    calibration: Callable[[int], SearchCalibration | None] = lambda version: None,
) -> dict[str, Any]:
    """The evaluations asked for (runner.to_dict each, collections named as resolved now),
    and notes on what could not be measured (a keyword ranking of a collection that has
    no keyword vectors). `calibration(version)`: the version's search calibration (its
    manifest's), which a hybrid ranking fuses with as the API does. CollectionNotFound for a
    collection the store does not hold."""
    embed = _remembered(embed)
    evaluations: list[dict[str, Any]] = []
    notes: list[str] = []
    names = [store.resolve(c) for c in request["collections"]]
    for data in request["judgements"]:
        judgements = set_from_dict(data)
        for mode in cast(list[Mode], request["modes"]):
            for name in names:
                rank = collection_ranker(
                    store,
                    name,
                    embed=embed,
                    mode=mode,
                    k=request["k"],
                    # Only a fusion has one: words or vectors alone need no manifest.
                    calibration=calibration(model_version_of(name)) if mode == "hybrid" else None,
                )
                try:
                    found = evaluate(
                        judgements,
                        rank,
                        collection=name,
                        mode=mode,
                        samples=request["samples"],
                        seed=request["seed"],
                        k=request["k"],
                    )
                except KeywordsUnavailable:
                    notes.append(f"{name} has no keyword vectors: no {mode} ranking to measure")
                    continue
                evaluations.append(to_dict(found))
    return {"evaluations": evaluations, "notes": notes}
