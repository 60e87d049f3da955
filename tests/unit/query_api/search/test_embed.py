"""A text query's embedding: the cache first, then one encoder call per query in flight.

The encoder is the stand-in of fixed vectors (tests/unit/query_api/conftest.py): Triton cannot
run in a unit test. The cache is the real one, over the session's Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.embedding.errors import EmbeddingError
from query_api.http.metrics import Metrics
from query_api.http.timing import Stages
from query_api.search.embed import QueryEmbedder
from tests.support.waiting import await_until
from tests.unit.query_api.conftest import DEADLINE_S, QUERIES, FixedEncoder, Later


def counted(metrics: Metrics, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_concurrent_misses_of_one_query_share_one_encoder_call(
    queries: QueryEmbedder, encoder: FixedEncoder, metrics: Metrics
) -> None:
    encoder.gate = asyncio.Event()
    first = asyncio.create_task(queries.embed("a cat", 1, Stages()))
    await asyncio.wait_for(encoder.entered.wait(), DEADLINE_S)
    second = asyncio.create_task(queries.embed("a cat", 1, Stages()))

    async def both_missed() -> bool:
        return counted(metrics, "photosearch_query_cache_total", {"result": "miss"}) == 2

    await await_until(both_missed, DEADLINE_S, "the second lookup's miss")
    encoder.gate.set()
    (one, cached_one), (two, cached_two) = await asyncio.gather(first, second)
    assert encoder.calls == [["a cat"]]
    assert (cached_one, cached_two) == (False, False)
    np.testing.assert_array_equal(one, QUERIES["a cat"])
    np.testing.assert_array_equal(two, QUERIES["a cat"])
    assert queries.inflight == {}


async def test_an_embedding_is_cached_per_model_version(
    queries: QueryEmbedder, encoder: FixedEncoder, later: Later
) -> None:
    await queries.embed("a dog", 1, Stages())
    await later.finish()
    _, cached = await queries.embed("a dog", 1, Stages())
    _, other_version = await queries.embed("a dog", 2, Stages())
    assert (cached, other_version) == (True, False)
    assert encoder.calls == [["a dog"], ["a dog"]]


class Failing(FixedEncoder):
    async def encode_token_ids(
        self, ids: Sequence[Sequence[int]], *, model_version: int, timeout_s: float | None = None
    ) -> Embeddings:
        raise EmbeddingError("triton is down")


async def test_a_failed_embedding_is_counted_and_nothing_is_cached(
    queries: QueryEmbedder, metrics: Metrics, later: Later
) -> None:
    queries.encoder = Failing()
    with pytest.raises(EmbeddingError):
        await queries.embed("a cat", 1, Stages())
    assert later.pending == []
    assert queries.inflight == {}
    errors = {"model": "text", "kind": "EmbeddingError"}
    assert counted(metrics, "photosearch_triton_errors_total", errors) == 1
