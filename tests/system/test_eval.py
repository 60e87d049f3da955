"""`photosearch eval` through the real Triton on the tiny model: two model versions compared,
answered by the worker that owns the embedded store and by the command itself alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from redis import Redis

from core.deployment import Presence
from core.embedding.client import EmbeddingClient
from core.quality.judgements import JudgementSet, Query, write_judgements
from core.taskqueue import control_queue
from core.vectorstore import LIVE_ALIAS, PhotoPoint, collection_name, open_store
from model.triton_server import TritonServer
from photosearch.eval_cli import PICKUP_S
from tests.support.images import encode
from tests.support.indexing import NAMES, WorkerProcess, cli, indexer_settings, variant

OLD, NEW = collection_name(1, "old"), collection_name(2, "new")
TITLES = {
    "astronaut": "astronaut in a spacesuit",
    "chelsea": "a tabby cat",
    "coffee": "cup of coffee",
    "rocket": "rocket on the launch pad",
    "camera": "man filming with a camera",
    "coins": "ancient coins",
    "moon": "surface of the moon",
    "hubble_deep_field": "galaxies in deep space",
}
SET = JudgementSet(
    "tiny",
    (
        Query("t1", "an astronaut", ("person",)),
        Query("t2", "a cat", ("animal",)),
        Query("t3", "a cup of coffee", ("object",)),
        Query("t4", "the moon", ("space",)),
        Query("t5", "a rocket launch", ("space", "object")),
        Query("t6", "old coins", ("object",)),
    ),
    {
        "t1": {"astronaut": 2},
        "t2": {"chelsea": 2},
        "t3": {"coffee": 2},
        "t4": {"moon": 2, "hubble_deep_field": 1},
        "t5": {"rocket": 2},
        "t6": {"coins": 2},
    },
)


async def _index(settings: Any, repository: Path, url: str) -> None:
    """The eight photos in two collections, one a model version; the live alias at the old."""
    images = [encode(variant(i), "PNG") for i in range(len(NAMES))]
    store = open_store(settings)
    try:
        async with EmbeddingClient(url, repository) as client:
            for name, version in ((OLD, 1), (NEW, 2)):
                vectors = await client.encode_image_bytes(images, model_version=version)
                store.create_collection(name, vectors.shape[1])
                store.upsert(
                    name,
                    [
                        PhotoPoint(photo, vectors[i], {"title": TITLES[photo]})
                        for i, photo in enumerate(NAMES)
                    ],
                )
        store.set_aliases({LIVE_ALIAS: OLD})
    finally:
        store.close()


async def test_eval_compares_two_models_on_the_worker_and_here(
    two_versions: tuple[Path, TritonServer], tmp_path: Path, redis: Redis
) -> None:
    repository, server = two_versions
    write_judgements(tmp_path / "tiny", SET)
    args = ["eval", "--judgements", str(tmp_path / "tiny"), "--compare", NEW, "--samples", "200"]
    with indexer_settings(tmp_path / "data", server.url, repository) as settings:
        await _index(settings, repository, server.url)
        with WorkerProcess(settings, tmp_path / "worker.log"):
            by_worker = cli(settings, *args, "--json", str(tmp_path / "worker.json"))
        # A worker that says it runs but takes nothing (one killed a moment ago): the
        # command withdraws its task and opens the store itself.
        gone = Presence(settings.redis.url, settings.redis.prefix, ttl_s=600, name="gone")
        gone.renew()
        gone.close()
        here = cli(settings, *args, "--json", str(tmp_path / "here.json"))
        assert redis.llen(control_queue(settings)) == 0  # withdrawn: no one will take it
    assert by_worker.returncode == 0, by_worker.stderr
    assert "on the worker that owns the embedded store" in by_worker.stderr
    assert here.returncode == 0, here.stderr
    assert f"no worker took it within {PICKUP_S} s: evaluating here" in here.stderr
    # The same figures wherever the store was read.
    assert by_worker.stdout == here.stdout
    found = json.loads((tmp_path / "here.json").read_text())
    assert found == json.loads((tmp_path / "worker.json").read_text())

    assert f"A: {OLD}" in here.stdout and f"B: {NEW}" in here.stdout
    for row in ("hybrid", "vector", "keyword", "vector space", "keyword object"):
        assert f"\n{row} " in here.stdout, here.stdout
    evaluations = {(e["mode"], e["collection"]): e for e in found["evaluations"]}
    assert set(evaluations) == {(m, c) for m in ("hybrid", "vector", "keyword") for c in (OLD, NEW)}
    assert all(len(e["per_query"]) == 6 and e["samples"] == 200 for e in evaluations.values())
    # Words rank alike in both collections (the same titles): no difference at all.
    keyword = next(c for c in found["comparisons"] if c["mode"] == "keyword")
    zero = {"mean": 0.0, "low": 0.0, "high": 0.0}
    assert keyword["difference"] == {"ndcg": zero, "recall": zero, "mrr": zero}
    # Each title names its photo's subject: words alone find every query's best photo first.
    assert evaluations["keyword", OLD]["mrr"]["mean"] == 1.0
    # The paired difference is the difference of the two means, query by query.
    vector = next(c for c in found["comparisons"] if c["mode"] == "vector")
    for metric in ("ndcg", "recall", "mrr"):
        a, b = evaluations["vector", OLD][metric], evaluations["vector", NEW][metric]
        assert abs(vector["difference"][metric]["mean"] - (b["mean"] - a["mean"])) < 1e-9
