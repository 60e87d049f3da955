"""The quality gate's record as `index status` and the admin API show it: a verdict's JSON
(indexer/jobs/quality_gate.py `decide`, on hand-made evaluations) as a table of live and new side
by side, and as the admin API's job field."""

from __future__ import annotations

from core.quality.judgements import Query
from core.quality.metrics import Interval
from core.quality.runner import Evaluation, QueryScore
from core.vectorstore import collection_name
from indexer.jobs.gate_status import gate_lines
from indexer.jobs.quality_gate import NOT_CONFIGURED, SetFigures, Verdict, decide
from query_api.schemas.admin import QualityGate

LIVE, NEW = collection_name(1, "live"), collection_name(2, "new")


def evaluation(collection: str, ndcg: float) -> Evaluation:
    """One set's evaluation whose every metric is `ndcg`, its interval +-0.1 around it."""
    score = QueryScore(Query("q1", "a red square"), ndcg, ndcg, ndcg, ("p1",))
    interval = Interval(ndcg, ndcg - 0.1, ndcg + 0.1)
    return Evaluation("shapes", collection, "hybrid", [score], interval, interval, interval, {})


def refused() -> Verdict:
    live, new = evaluation(LIVE, 0.8), evaluation(NEW, 0.3)
    difference = dict.fromkeys(("ndcg", "recall", "mrr"), Interval(-0.5, -0.6, -0.4))
    figures = SetFigures("shapes", live, new, difference)
    return decide([figures], live=LIVE, new=NEW, mode="hybrid", max_drop=0.01, force=False)


def test_the_status_shows_the_decision_and_live_and_new_side_by_side() -> None:
    verdict = refused()
    assert verdict.refusal is not None
    lines = gate_lines(verdict.to_json())
    assert lines[0] == f"    quality gate: {verdict.record['message']}"
    assert lines[1].split() == [
        "SET",
        "QUERIES",
        "METRIC",
        "LIVE",
        "m1",
        "NEW",
        "m2",
        "NEW",
        "-",
        "LIVE",
    ]
    assert lines[2].split() == [
        *("shapes", "1", "nDCG@10", "0.800", "[0.700,", "0.900]", "0.300", "[0.200,", "0.400]"),
        *("-0.500", "[-0.600,", "-0.400]", "refused"),
    ]
    assert [line.split()[0] for line in lines[3:]] == ["recall@10", "MRR@10"]


def test_a_gate_without_sets_or_not_run_shows_its_message_or_nothing() -> None:
    unconfigured = Verdict({"status": "unconfigured", "message": NOT_CONFIGURED, "sets": []})
    assert gate_lines(unconfigured.to_json()) == [f"    quality gate: {NOT_CONFIGURED}"]
    assert gate_lines("") == []


def test_the_admin_api_reads_the_gates_record() -> None:
    shown = QualityGate.model_validate(refused().record)
    assert (shown.status, shown.sets[0].new.ndcg.mean, shown.sets[0].failed) == (
        "refused",
        0.3,
        True,
    )
    assert shown.live is not None and shown.live.model_version == 1
    bare = QualityGate.model_validate(
        {"status": "unconfigured", "message": NOT_CONFIGURED, "mode": "hybrid", "sets": []}
    )
    assert (bare.sets, bare.live) == ([], None)
