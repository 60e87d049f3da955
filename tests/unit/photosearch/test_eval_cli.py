"""`photosearch eval` on an embedded store no process holds: keyword figures by hand (no
Triton needed for words alone), and bad sets, collections and modes refused with a message;
a Redis lost while a worker evaluates is waited out."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from typer.testing import CliRunner

from core.quality.judgements import JudgementSet, Query, write_judgements
from core.settings import Settings, get_settings
from core.vectorstore import LIVE_ALIAS, open_store
from photosearch import eval_cli
from photosearch.cli import app
from tests.support.reconnecting import failing_first, on_a_test_clock
from tests.unit.core.quality.conftest import GOOD, PHOTOS

WORDS = JudgementSet(
    "words",
    (Query("w1", "cat", ("animal",)), Query("w2", "moon", ("space",))),
    {"w1": {"cat1": 1, "cat2": 1}, "w2": {"moon": 2}},
)


@pytest.fixture
def data_dir(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data directory whose embedded store holds the fixture's photos, live; settings on
    the session's Redis under a prefix no worker uses."""
    monkeypatch.setenv("PHOTOSEARCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PHOTOSEARCH_REDIS__URL", redis_url)
    monkeypatch.setenv("PHOTOSEARCH_REDIS__PREFIX", f"unit-{uuid.uuid4().hex}")
    get_settings.cache_clear()
    store = open_store(get_settings())
    store.create_collection(GOOD, 4)
    store.upsert(GOOD, PHOTOS)
    store.set_aliases({LIVE_ALIAS: GOOD})
    store.close()
    yield tmp_path / "data"
    monkeypatch.undo()
    get_settings.cache_clear()


def test_keyword_figures_equal_a_hand_computation(data_dir: Path, tmp_path: Path) -> None:
    write_judgements(tmp_path / "words", WORDS)
    out = tmp_path / "eval.json"
    args = ["eval", "--judgements", str(tmp_path / "words"), "--mode", "keyword"]
    answer = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert answer.exit_code == 0, answer.output
    # w1: cat1 and cat2 hold "cat", one group: one of them shown, first. nDCG: 1 over the
    # ideal 1 + 1/log2(3); recall 1/2; MRR 1. w2: the moon first: 1, 1, 1.
    w1 = 1 / (1 + 1 / math.log2(3))
    found = json.loads(out.read_text())
    (evaluation,) = found["evaluations"]
    assert evaluation["collection"] == GOOD
    assert evaluation["ndcg"]["mean"] == pytest.approx((w1 + 1) / 2)
    assert evaluation["recall"]["mean"] == 0.75
    assert evaluation["mrr"]["mean"] == 1.0
    assert evaluation["by_tag"]["space"]["ndcg"] == {"mean": 1.0, "low": 1.0, "high": 1.0}
    assert f"collection {GOOD}" in answer.output
    assert re.search(rf"^keyword +2 +{(w1 + 1) / 2:.3f} \[", answer.output, re.M)
    assert re.search(rf"^keyword animal +1 +{w1:.3f} \[{w1:.3f}, {w1:.3f}\]", answer.output, re.M)


def test_a_bad_set_is_refused_with_its_line(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "queries.tsv").write_text("q1\tcat\n")
    (tmp_path / "bad" / "qrels.txt").write_text("q1 0 cat1 high\n")
    wide = {"COLUMNS": "1000"}  # the path and its line on one line of the error's box
    answer = CliRunner().invoke(app, ["eval", "--judgements", str(tmp_path / "bad")], env=wide)
    assert answer.exit_code == 2
    assert "qrels.txt:1: grade 'high' is not an integer" in answer.output


def test_an_unknown_collection_is_refused(data_dir: Path, tmp_path: Path) -> None:
    write_judgements(tmp_path / "words", WORDS)
    args = ["eval", "--judgements", str(tmp_path / "words"), "--mode", "keyword"]
    answer = CliRunner().invoke(app, [*args, "--compare", "photos-m9-nowhere"])
    assert answer.exit_code == 1
    assert "refused: no collection or alias photos-m9-nowhere" in answer.output


def test_a_redis_lost_while_the_worker_evaluates_is_waited_out_and_the_set_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer: dict[str, Any] = {"evaluations": [], "notes": []}
    asked: list[dict[str, Any]] = []

    def ask_worker(settings: Settings, redis: Any, request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return answer

    retries = on_a_test_clock(monkeypatch)
    lost = [RedisConnectionError("Connection reset by peer"), RedisConnectionError("refused")]
    monkeypatch.setattr(eval_cli, "_workers_running", lambda redis, settings: True)
    monkeypatch.setattr(eval_cli, "_ask_worker", failing_first(ask_worker, lost))
    settings = Settings(data_dir=tmp_path)  # the embedded store: a worker owns it
    assert eval_cli._evaluate(settings, {"sets": "..."}) is answer
    assert asked == [{"sets": "..."}]
    assert retries.waits == [0.5, 1.0]
    assert retries.said[0].startswith("lost Redis at ")
