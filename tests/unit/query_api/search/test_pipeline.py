"""The path of one query, on the in-process store: ranking by the query's vector, the cache,
`not`, more like this, recommendations and a live collection that changes under a search.

The text encoder is a stand-in of fixed vectors (tests/unit/query_api/conftest.py): Triton
cannot run in a unit test. Everything else is real: Qdrant Edge, the cache over the session's
Redis, the admission slots, the arrangement of results.
"""

from __future__ import annotations

import pytest

from core.payload import PhotoPayload
from core.vectorstore import LIVE_ALIAS, StoredPhoto, VectorStore, collection_name
from query_api.http.errors import ApiError
from query_api.http.timing import Stages
from query_api.schemas.answers import SearchResponse
from query_api.schemas.search import Page, RecommendSearch, TextSearch
from query_api.search.embed import QueryEmbedder
from query_api.search.kinds import RecommendKind, SimilarKind, TextKind, text_embeddings
from query_api.search.pipeline import SearchParts, search, stored_photo
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection, StoreCalls
from tests.unit.query_api.conftest import (
    DIM,
    PHOTOS,
    FixedEncoder,
    Later,
    unit,
    write_photos,
)

ROOT = "/api"


async def answer(
    query: TextSearch,
    queries: QueryEmbedder,
    calls: StoreCalls,
    live: LiveCollection,
    *,
    reveal_cache: bool = True,
) -> SearchResponse:
    reranking = Reranking(1, pool=50, diversity_window=1000, timeout_s=30, retry_after_s=7)
    try:
        return await search(
            TextKind(query, queries, reveal_cache=reveal_cache),
            SearchParts(calls, live, reranking, ROOT, Stages()),
        )
    finally:
        reranking.close()


async def search_ids(
    query: TextSearch, queries: QueryEmbedder, calls: StoreCalls, live: LiveCollection
) -> list[str]:
    return [result.id for result in (await answer(query, queries, calls, live)).results]


async def test_a_text_search_ranks_the_photos_by_the_query_embedding(
    queries: QueryEmbedder, calls: StoreCalls, live: LiveCollection
) -> None:
    response = await answer(TextSearch(q="A  Cat", mode="vector", limit=2), queries, calls, live)
    assert [r.id for r in response.results] == ["cat-1", "cat-2"]
    assert response.model_version == 1
    assert response.next_offset == 2
    assert response.results[0].metadata.title == "cat 1"
    assert response.results[0].image_url == "/api/v1/photos/cat-1/image"


async def test_the_second_search_of_a_query_takes_its_embedding_from_the_cache(
    queries: QueryEmbedder,
    calls: StoreCalls,
    live: LiveCollection,
    encoder: FixedEncoder,
    later: Later,
) -> None:
    query = TextSearch(q="a dog", mode="vector", limit=1)
    first = await answer(query, queries, calls, live)
    await later.finish()  # the cache is written after the answer
    second = await answer(query, queries, calls, live)
    assert (first.cached, second.cached) == (False, True)
    assert [r.id for r in second.results] == [r.id for r in first.results] == ["dog-1"]
    assert encoder.calls == [["a dog"]]


async def test_only_an_operator_is_told_whether_the_embedding_was_cached(
    queries: QueryEmbedder, calls: StoreCalls, live: LiveCollection
) -> None:
    response = await answer(
        TextSearch(q="a dog", mode="vector"), queries, calls, live, reveal_cache=False
    )
    assert response.cached is None


async def test_not_moves_the_query_away_from_its_descriptions(
    queries: QueryEmbedder, calls: StoreCalls, live: LiveCollection
) -> None:
    # "a kitten" leans toward cat-2's third axis: away from it, cat-1 leads by more.
    plain = await search_ids(TextSearch(q="a kitten", mode="vector", limit=2), queries, calls, live)
    moved = TextSearch.model_validate(
        {"q": "a kitten", "not": ["a cat"], "not_weight": 0.9, "mode": "vector", "limit": 2}
    )
    assert plain == ["cat-1", "cat-2"]
    assert (await search_ids(moved, queries, calls, live))[0] == "cat-2"


async def test_a_query_that_is_its_own_not_is_refused(
    queries: QueryEmbedder, calls: StoreCalls, live: LiveCollection
) -> None:
    query = TextSearch.model_validate({"q": "a cat", "not": ["A cat"], "not_weight": 1.0})
    with pytest.raises(ApiError) as refused:
        await search_ids(query, queries, calls, live)
    assert refused.value.status == 422


async def test_a_search_whose_collection_was_dropped_reads_the_new_live_one(
    queries: QueryEmbedder, own_store: VectorStore, own_live: LiveCollection
) -> None:
    store, live = own_store, own_live
    assert await live.name() == collection_name(1, "a")
    # A reindex switches the alias and drops the collection while the old name is still
    # reused: the search asks the store again once, and reads the new collection.
    new = collection_name(1, "b")
    store.create_collection(new, DIM)
    write_photos(store, new, {"dog-2": unit(0, 1, 0, 0)})
    store.set_aliases({LIVE_ALIAS: new})
    store.drop_collection(collection_name(1, "a"))
    response = await answer(
        TextSearch(q="a dog", mode="vector", limit=1), queries, live.calls, live
    )
    assert (response.collection, [r.id for r in response.results]) == (new, ["dog-2"])


async def test_more_like_this_never_returns_the_photo_itself(
    calls: StoreCalls, live: LiveCollection, reranking: Reranking
) -> None:
    response = await search(
        SimilarKind(Page(limit=3), "cat-1"), SearchParts(calls, live, reranking, ROOT, Stages())
    )
    assert [r.id for r in response.results] == ["cat-2", "dog-1", "boat-1"]


async def test_more_like_a_photo_that_is_not_indexed_is_not_found(
    calls: StoreCalls, live: LiveCollection, reranking: Reranking
) -> None:
    with pytest.raises(ApiError) as missing:
        await search(
            SimilarKind(Page(), "unicorn-1"), SearchParts(calls, live, reranking, "", Stages())
        )
    assert (missing.value.status, str(missing.value)) == (404, "no photo 'unicorn-1' in the index")


async def test_a_recommendation_leans_to_its_positives_and_excludes_its_examples(
    calls: StoreCalls, live: LiveCollection, reranking: Reranking
) -> None:
    query = RecommendSearch(positive=["cat-1"], negative=["boat-1"], limit=2)
    response = await search(
        RecommendKind(query), SearchParts(calls, live, reranking, ROOT, Stages())
    )
    ids = [r.id for r in response.results]
    assert ids[0] == "cat-2"
    assert not {"cat-1", "boat-1"} & set(ids)
    assert set(ids) <= set(PHOTOS)


def test_a_text_search_makes_an_embedding_per_distinct_text_it_uses() -> None:
    assert text_embeddings(TextSearch(q="a cat")) == 1
    assert text_embeddings(TextSearch(q="a cat", mode="keyword", not_=["dogs"])) == 0
    nots = [f"thing {n}" for n in range(5)]
    assert text_embeddings(TextSearch(q="a cat", not_=nots)) == 6
    # Texts alike once normalized are embedded once; with no weight `not` is not embedded.
    assert text_embeddings(TextSearch(q="a cat", not_=["Dogs", "dogs ", "A cat"])) == 2
    assert text_embeddings(TextSearch(q="a cat", not_=nots, not_weight=0)) == 1


def test_a_photo_shows_its_automatic_tags_apart_from_the_photographer_s() -> None:
    payload: PhotoPayload = {"title": "Harbour", "tags": ["boat"], "auto_tags": ["sea", "boat"]}
    photo = stored_photo(ROOT, StoredPhoto("p1", payload))
    assert (photo.auto_tags, photo.metadata.tags) == (["sea", "boat"], ["boat"])
    assert stored_photo(ROOT, StoredPhoto("p2", {"title": "Old"})).auto_tags == []
