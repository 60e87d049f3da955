"""query_api/search/candidate.py on the in-process store: the candidate collection is searched
by its name with its own model version's query embedding, beside the live one, and their
interleaved page labels each result with its side; a candidate dropped leaves the live answer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from core.feedback.searchlog import new_search_id
from core.vectorstore import VectorStore, collection_name
from query_api.http.timing import Stages
from query_api.schemas.answers import SearchResponse
from query_api.schemas.search import TextSearch
from query_api.search.candidate import NamedCollection
from query_api.search.embed import QueryEmbedder
from query_api.search.experiment import Draw, ExperimentMetrics, SearchIn, interleaved_search
from query_api.search.kinds import TextKind
from query_api.search.pipeline import SearchParts, search
from query_api.search.reranking import Reranking
from query_api.services import LiveCollection
from tests.unit.query_api.conftest import DIM, LIVE, FixedEncoder, unit, write_photos

CANDIDATE = collection_name(2, "b")
# The candidate's model sees other cats first: a cat of its own, then the live's second cat.
CANDIDATE_PHOTOS = {
    "cat-3": unit(1, 0, 0, 0),
    "cat-2": unit(1, 0, 0.1, 0),
    "cat-1": unit(1, 0, 0.5, 0),
    "dog-1": unit(0, 1, 0, 0),
}


def _search_in(queries: QueryEmbedder, live: LiveCollection, query: TextSearch) -> SearchIn:
    reranking = Reranking(1, pool=50, diversity_window=1000, timeout_s=30, retry_after_s=7)

    async def search_in(collection: str | None, stages: Stages) -> SearchResponse:
        side = live if collection is None else NamedCollection(live.calls, collection)
        return await search(
            TextKind(query, queries, reveal_cache=True),
            SearchParts(live.calls, side, reranking, "/api", stages),
        )

    return search_in


async def test_the_candidate_is_searched_by_name_with_its_own_model_version(
    queries: QueryEmbedder, encoder: FixedEncoder, own_store: VectorStore, own_live: LiveCollection
) -> None:
    own_store.create_collection(CANDIDATE, DIM)
    write_photos(own_store, CANDIDATE, CANDIDATE_PHOTOS)
    query = TextSearch(q="a cat", mode="vector", limit=2, collapse=False)
    search_in = _search_in(queries, own_live, query)
    live = await search_in(None, Stages())
    candidate = await search_in(CANDIDATE, Stages())
    assert (live.collection, [r.id for r in live.results]) == (LIVE, ["cat-1", "cat-2"])
    assert (candidate.collection, candidate.model_version) == (CANDIDATE, 2)
    assert [r.id for r in candidate.results] == ["cat-3", "cat-2"]
    # Version 2's embedding is not version 1's cached one: a second call to the encoder.
    assert encoder.calls == [["a cat"], ["a cat"]]

    metrics = ExperimentMetrics(CollectorRegistry())
    draw = Draw("e1", CANDIDATE, new_search_id())
    answer, sides = await interleaved_search(draw, 2, search_in, Stages(), metrics)
    assert sides is not None
    assert dict(zip([r.id for r in answer.results], sides, strict=True)) in (
        {"cat-1": "live", "cat-3": "candidate"},
        {"cat-3": "candidate", "cat-1": "live"},
    )
    assert (answer.collection, answer.search_id) == (LIVE, draw.search_id)


async def test_a_dropped_candidate_leaves_the_live_answer(
    queries: QueryEmbedder, own_live: LiveCollection
) -> None:
    query = TextSearch(q="a dog", mode="vector", limit=1)
    search_in = _search_in(queries, own_live, query)
    metrics = ExperimentMetrics(CollectorRegistry())
    draw = Draw("e1", collection_name(2, "gone"), new_search_id())
    answer, sides = await interleaved_search(draw, 1, search_in, Stages(), metrics)
    assert sides is None
    assert [r.id for r in answer.results] == ["dog-1"]
    assert metrics.searches.labels("failed")._value.get() == 1
