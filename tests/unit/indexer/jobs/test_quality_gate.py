"""The quality gate's decision on the in-process store: fixed photo vectors in a live and a new
collection, and Triton's text encoder stood in for by fixed query vectors (it cannot run in a
unit test): a "good" model version puts each query on its relevant photo, a "bad" one two
photos away from it (ranked third: nDCG@10 = 1 / log2(4) = 0.5). The clicks' set is read from
a search log recorded in the session's Redis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from redis import Redis

from core.embedding.arrays import Embeddings
from core.feedback.events import events_key
from core.feedback.searchlog import record_key, searches_key
from core.jobstatus import JobKind, JobStatus
from core.quality.judgements import JudgementSet, Query, write_judgements
from core.vectorstore import LIVE_ALIAS, PhotoPoint, VectorStore, collection_name
from indexer.jobs.quality_gate import (
    NO_CLICKS,
    NO_LIVE,
    NOT_CONFIGURED,
    Verdict,
    click_judgements,
    judge,
)
from indexer.queue.records import JobRecords
from tests.unit.core.feedback.conftest import EVENTS, RECORDS
from tests.unit.indexer.conftest import DIM

GOOD, BAD = 1, 2
PHOTOS = 4
TEXTS = ("a red square", "a blue circle", "a green star", "a black line")


def unit(*weights: tuple[int, float]) -> Embeddings:
    vector = np.zeros(DIM, dtype=np.float32)
    for i, weight in weights:
        vector[i % PHOTOS] += weight
    unit_vector: Embeddings = vector / np.linalg.norm(vector)
    return unit_vector


def embed(texts: Sequence[str], version: int) -> Embeddings:
    """Query i on photo i at the good version; at the bad one nearest photo i+1, then i+2,
    then photo i (third), then i+3 (not at all)."""
    rows = []
    for text in texts:
        i = TEXTS.index(text)
        rows.append(
            unit((i, 1.0)) if version == GOOD else unit((i + 1, 1.0), (i + 2, 0.5), (i, 0.2))
        )
    return np.stack(rows)


def collection(store: VectorStore, version: int) -> str:
    """A collection at that model version holding photo i on axis i."""
    name = collection_name(version, f"gate{version}")
    store.create_collection(name, DIM)
    store.upsert(name, [PhotoPoint(f"p{i}", unit((i, 1.0)), {}) for i in range(PHOTOS)])
    return name


@pytest.fixture
def sets(tmp_path: Path) -> list[str]:
    """One judgement set: query i finds photo i (grade 2)."""
    queries = tuple(Query(f"q{i}", text) for i, text in enumerate(TEXTS))
    qrels = {f"q{i}": {f"p{i}": 2} for i in range(PHOTOS)}
    path = tmp_path / "shapes"
    write_judgements(path, JudgementSet("shapes", queries, qrels))
    return [str(path)]


def reindex_job(records: JobRecords, new: str, *, force: bool = False) -> JobStatus:
    job_id = records.jobs.create(JobKind.REINDEX, collection=new, force=int(force))
    found = records.jobs.get(job_id)
    assert found is not None
    return found


def gate(
    store: VectorStore,
    job: JobStatus,
    paths: Sequence[str],
    max_drop: float = 0.01,
    clicks: JudgementSet | None = None,
    calibrated: list[int] | None = None,
) -> Verdict:
    def calibration(version: int) -> None:
        if calibrated is not None:
            calibrated.append(version)

    return judge(
        job,
        store=store,
        paths=paths,
        embed=embed,
        mode="vector",
        max_drop=max_drop,
        clicks=None if clicks is None else (lambda: clicks),
        calibration=calibration,
        samples=200,
    )


def test_a_new_model_that_ranks_worse_is_refused_with_both_figures(
    store: VectorStore, records: JobRecords, sets: list[str]
) -> None:
    live, new = collection(store, GOOD), collection(store, BAD)
    store.set_aliases({LIVE_ALIAS: live})
    calibrated: list[int] = []
    verdict = gate(store, reindex_job(records, new), sets, calibrated=calibrated)
    assert calibrated == [GOOD, BAD]  # each ranked with its own version's calibration
    assert verdict.status == "refused"
    assert verdict.refusal is not None
    assert "nDCG@10 1.000 -> 0.500" in verdict.refusal and "--force" in verdict.refusal
    [shapes] = verdict.record["sets"]
    assert shapes["queries"] == PHOTOS and shapes["failed"] is True
    assert shapes["live"]["ndcg"] == {"mean": 1.0, "low": 1.0, "high": 1.0}
    assert shapes["new"]["ndcg"] == {"mean": 0.5, "low": 0.5, "high": 0.5}
    assert shapes["new"]["mrr"]["mean"] == pytest.approx(1 / 3, abs=1e-4)
    assert shapes["difference"]["ndcg"]["mean"] == -0.5
    assert verdict.record["live"] == {"collection": live, "model_version": GOOD}
    assert verdict.record["new"] == {"collection": new, "model_version": BAD}


def test_a_new_model_that_ranks_better_or_within_the_drop_passes(
    store: VectorStore, records: JobRecords, sets: list[str]
) -> None:
    bad, good = collection(store, BAD), collection(store, GOOD)
    store.set_aliases({LIVE_ALIAS: bad})
    better = gate(store, reindex_job(records, good), sets)
    assert (better.status, better.refusal) == ("passed", None)
    assert better.record["sets"][0]["difference"]["ndcg"]["mean"] == 0.5

    store.set_aliases({LIVE_ALIAS: good})
    assert gate(store, reindex_job(records, bad), sets, max_drop=0.5).status == "passed"
    assert gate(store, reindex_job(records, bad), sets, max_drop=0.49).status == "refused"


def test_a_forced_job_overrides_the_gate_and_keeps_the_figures(
    store: VectorStore, records: JobRecords, sets: list[str]
) -> None:
    live, new = collection(store, GOOD), collection(store, BAD)
    store.set_aliases({LIVE_ALIAS: live})
    verdict = gate(store, reindex_job(records, new, force=True), sets)
    assert (verdict.status, verdict.refusal) == ("overridden", None)
    assert verdict.record["message"].startswith("quality gate overridden (forced): on shapes")
    assert verdict.record["sets"][0]["new"]["ndcg"]["mean"] == 0.5


def test_without_judgement_sets_or_a_live_collection_the_gate_says_so_and_passes(
    store: VectorStore, records: JobRecords, sets: list[str]
) -> None:
    new = collection(store, BAD)
    unconfigured = gate(store, reindex_job(records, new), [])
    assert (unconfigured.status, unconfigured.refusal) == ("unconfigured", None)
    assert unconfigured.record["message"] == NOT_CONFIGURED
    first = gate(store, reindex_job(records, new), sets)
    assert (first.status, first.refusal, first.record["message"]) == (
        "no live collection",
        None,
        NO_LIVE,
    )


def test_a_judgement_set_that_cannot_be_read_refuses_unless_forced(
    store: VectorStore, records: JobRecords, tmp_path: Path
) -> None:
    live, new = collection(store, GOOD), collection(store, BAD)
    store.set_aliases({LIVE_ALIAS: live})
    missing = [str(tmp_path / "nowhere")]
    refused = gate(store, reindex_job(records, new), missing)
    assert refused.status == "refused"
    assert refused.refusal is not None and "PHOTOSEARCH_INDEXER__JUDGEMENTS" in refused.refusal
    assert gate(store, reindex_job(records, new, force=True), missing).status == "overridden"


def test_the_clicks_set_is_the_click_models_of_the_search_log_kept(
    redis: Redis, records: JobRecords
) -> None:
    """The log of tests/unit/core/feedback (test_clickmodel.py counts it by hand), recorded at
    t=1000 s as the API records it."""
    prefix, day = records.jobs.prefix, 86400
    for record in RECORDS:
        redis.set(record_key(prefix, record.search_id), record.model_dump_json())
        # The stream's ids are the writer's clock in ms, as core/feedback/searchlog.py appends.
        redis.xadd(searches_key(prefix), {"id": record.search_id}, id=f"{int(record.at * 1000)}-*")
    for event in EVENTS:
        redis.xadd(
            events_key(prefix), {"event": event.model_dump_json()}, id=f"{int(event.at * 1000)}-*"
        )
    made = click_judgements(redis, prefix, retention_s=day, now=lambda: 1010.0)
    [query] = made.queries
    assert (made.name, query.text) == ("clicks", "red car")
    assert dict(made.grades(query.id)) == {"a": 2, "b": 1, "c": 2, "d": 1}
    assert (
        click_judgements(redis, prefix, retention_s=day, now=lambda: 1000.0 + 2 * day).queries == ()
    )


def test_the_clicks_set_is_gated_beside_the_curated_ones_or_noted_when_empty(
    store: VectorStore, records: JobRecords, sets: list[str]
) -> None:
    live, new = collection(store, GOOD), collection(store, BAD)
    store.set_aliases({LIVE_ALIAS: live})
    clicked = JudgementSet("clicks", (Query("c0", TEXTS[0]),), {"c0": {"p0": 2}})
    verdict = gate(store, reindex_job(records, new), sets, clicks=clicked)
    assert [s["name"] for s in verdict.record["sets"]] == ["shapes", "clicks"]
    assert verdict.record["sets"][1]["failed"] is True

    empty = JudgementSet("clicks", ())
    noted = gate(store, reindex_job(records, new), sets, clicks=empty)
    assert noted.record["notes"] == [f"clicks: {NO_CLICKS}"]
    alone = gate(store, reindex_job(records, new), [], clicks=empty)
    assert (alone.status, alone.record["message"]) == (
        "unconfigured",
        f"clicks: {NO_CLICKS}; {NOT_CONFIGURED}",
    )
