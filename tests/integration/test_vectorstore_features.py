"""Keyword search, search by example, near-duplicate lookups and groups, the same on Qdrant Edge,
on qdrant-client's local mode and on a Qdrant server (the stand-in of tests.support)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from core.embedding.arrays import Embeddings
from core.keywords import query_vector
from core.payload import PhotoPayload, as_json
from core.settings import QdrantSettings, Settings
from core.vectorstore import (
    GROUP_FIELD,
    VECTOR_NAME,
    Hit,
    KeywordsUnavailable,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    VectorStore,
    collection_name,
    nearest_each,
    open_store,
    point_id,
)
from core.vectorstore.edge import EdgeStore
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.schema import CollectionSchema
from tests.support.qdrant_server import clear, qdrant_stand_in
from tests.support.stores import as_stored

DIM = 16
COLL = collection_name(2, "f")
# An orthonormal basis: photos built from separate parts of it have a known cosine.
E = np.linalg.qr(np.random.default_rng(3).normal(size=(DIM, DIM)))[0].T.astype(np.float32)


def unit(v: Embeddings) -> Embeddings:
    return np.asarray(v / np.linalg.norm(v), dtype=np.float32)


def elsewhere(seed: int) -> Embeddings:
    """A photo unlike the built ones: made of the basis' last ten directions only."""
    return unit(np.random.default_rng(seed).normal(size=10) @ E[6:])


# Photo id -> (title, tags, photographer, group, vector). p10 and p11 are the examples of the
# recommendations: p12 is more like p11 than like p10, p13 more like p10. p14..p16 are the
# near-duplicates: p15 is p14 at 0.995, p16 is p14 at 0.85.
ROWS: dict[str, tuple[str, list[str], str, str | None, Embeddings]] = {
    "p00": ("Dog on the beach", ["dog", "beach"], "ann", "p00", elsewhere(0)),
    "p01": ("Dog in the park", ["dog", "park"], "bob", "p00", elsewhere(1)),
    "p02": ("Sleeping dog", ["dog"], "ann", "p00", elsewhere(2)),
    "p03": ("Old lighthouse at dusk", ["coast"], "cy", None, elsewhere(3)),
    "p04": ("Café de Flore", ["paris"], "bob", None, elsewhere(4)),
    "p05": ("City street at night", ["city"], "ann", None, elsewhere(5)),
    "p06": ("Cat on a sofa", ["cat"], "cy", None, elsewhere(6)),
    "p07": ("Mountain lake", ["lake"], "bob", None, elsewhere(7)),
    "p08": ("Forest trail", ["forest"], "cy", None, elsewhere(8)),
    "p09": ("Market stalls", ["market"], "bob", None, elsewhere(9)),
    "p10": ("Red tulips", ["flowers"], "bob", None, E[0]),
    "p11": ("Yellow tulips", ["flowers"], "cy", None, E[1]),
    "p12": ("Orange tulips", ["flowers"], "cy", None, unit(0.8 * E[0] + 0.9 * E[1])),
    "p13": ("Pink tulips", ["flowers"], "bob", None, unit(0.6 * E[0] + 0.1 * E[1] + 0.79 * E[2])),
    "p14": ("Harbour crane", ["port"], "cy", "p14", E[3]),
    "p15": ("Harbour crane again", ["port"], "cy", "p14", unit(E[3] + 0.1 * E[4])),
    "p16": ("Harbour crane, wide", ["port"], "bob", None, unit(E[3] + 0.62 * E[5])),
    "p17": ("Desert road", ["road"], "bob", None, elsewhere(17)),
    "p18": ("Snowy peak", ["mountain"], "cy", None, elsewhere(18)),
    "p19": ("Rainy window", ["rain"], "bob", None, elsewhere(19)),
}
N = len(ROWS)
VECS = {pid: row[4] for pid, row in ROWS.items()}


def payload(pid: str, **changes: Unpack[PhotoPayload]) -> PhotoPayload:
    """The indexer's payload of a photo: every metadata field named, and its group."""
    title, tags, photographer, group, _ = ROWS[pid]
    body: PhotoPayload = {
        "photo_id": pid,
        "title": title,
        "tags": tags,
        "photographer": photographer,
        "license": "cc-by",
        "created_at": "2024-01-01T12:00:00+00:00",
        "extra": {},
        "meta_hash": f"m-{pid}",
        GROUP_FIELD: group or pid,
    }
    return body | changes


def metadata(pid: str, **changes: Unpack[PhotoPayload]) -> PhotoPayload:
    """What a metadata-only change writes: the payload without the group label."""
    body = payload(pid, **changes)
    del body[GROUP_FIELD]
    return body


PHOTOS = [PhotoPoint(pid, VECS[pid], payload(pid)) for pid in ROWS]


def edge_store(path: Path) -> EdgeStore:
    return EdgeStore(
        path,
        schema=CollectionSchema(hnsw_ef_construct=64),
        # The 4-bit copies misrank close neighbours: rescoring needs the shipped oversampling.
        tuning=SearchTuning(hnsw_ef=64, oversampling=QdrantSettings().oversampling),
    )


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    with qdrant_stand_in() as url:
        yield url


def server_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> VectorStore:
    if kind == "qdrant-local":
        return open_store(Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=":memory:")))
    url: str = request.getfixturevalue("qdrant_url")
    clear(url)  # one server for the module: each test starts from an empty one
    return open_store(Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=url)))


@pytest.fixture(params=["edge", "qdrant-local", "qdrant-http"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s: VectorStore
    if request.param == "edge":
        s = edge_store(tmp_path / "vectors")
    else:
        s = server_store(request.param, request, tmp_path)
    s.create_collection(COLL, DIM)
    s.upsert(COLL, PHOTOS)
    yield s
    s.close()


def ids(hits: list[Hit]) -> list[str]:
    return [h.photo_id for h in hits]


def keywords(store: VectorStore, text: str, **options: Any) -> list[str]:
    return ids(store.keyword_search(COLL, query_vector(text), limit=N, **options))


def test_a_rare_word_ranks_its_photo_first(store: VectorStore) -> None:
    # "dog" is in three photos, "lighthouse" in one: its rarity weighs more.
    hits = store.keyword_search(COLL, query_vector("dog lighthouse"), limit=N)
    assert ids(hits)[0] == "p03"
    assert set(ids(hits)) == {"p00", "p01", "p02", "p03"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)
    assert hits[0].payload == payload("p03") and hits[0].vector is None
    # p02 says "dog" twice (title and tag): it scores above the ones that say it once.
    assert keywords(store, "dog")[0] == "p02"


def test_words_match_whatever_their_case_and_accents(store: VectorStore) -> None:
    assert keywords(store, "cafe") == ["p04"]
    assert keywords(store, "CAFÉ flore") == ["p04"]
    assert keywords(store, "Lighthouse") == ["p03"]
    assert set(keywords(store, "ann")) == {"p00", "p02", "p05"}  # photographers' words too
    # Only stopwords, or words no photo has: nothing.
    assert keywords(store, "the of a") == []
    assert keywords(store, "zeppelin") == []


def test_keyword_search_respects_the_filter(store: VectorStore) -> None:
    assert set(keywords(store, "dog", filter=SearchFilter(photographer="ann"))) == {"p00", "p02"}
    assert set(keywords(store, "dog", filter=SearchFilter(exclude_ids=("p02",)))) == {"p00", "p01"}
    assert keywords(store, "dog", filter=SearchFilter(tags_all=("park",))) == ["p01"]
    assert set(keywords(store, "tulips")) == {"p10", "p11", "p12", "p13"}
    assert len(store.keyword_search(COLL, query_vector("tulips"), limit=2)) == 2


def test_a_metadata_change_rewrites_the_keywords_and_keeps_the_group(store: VectorStore) -> None:
    store.set_group(COLL, "p00", ["p03"])  # the indexer put p03 in the dogs' group meanwhile
    store.set_payload(COLL, "p03", metadata("p03", title="Windmill at dawn", meta_hash="x"))
    assert keywords(store, "lighthouse") == []
    assert keywords(store, "windmill dawn") == ["p03"]
    [stored] = store.retrieve(COLL, ["p03"], with_vectors=True)
    assert stored.payload == payload("p03", title="Windmill at dawn", meta_hash="x") | {
        GROUP_FIELD: "p00"
    }
    assert stored.vector is not None
    assert np.allclose(stored.vector, as_stored(store, VECS["p03"]), atol=1e-5)
    # Many at once; a photo left without any words is no longer found by its old ones, and
    # gains words again later.
    store.set_payloads(
        COLL,
        {
            "p05": metadata("p05", title=None, tags=[], photographer=None),
            "p06": metadata("p06", title="Cat on a windmill"),
        },
    )
    assert keywords(store, "city street") == []
    assert set(keywords(store, "windmill")) == {"p03", "p06"}
    assert ids(store.search(COLL, VECS["p05"], limit=1)) == ["p05"]
    store.set_payloads(COLL, {"p05": metadata("p05", title="Street again")})
    assert keywords(store, "street") == ["p05"]
    assert all(h.score > 0 for h in store.keyword_search(COLL, query_vector("street"), limit=N))
    # An upsert writes the keywords of its payload too.
    store.upsert(COLL, [PhotoPoint("p07", VECS["p07"], payload("p07", title="Volcano"))])
    assert keywords(store, "volcano") == ["p07"] and keywords(store, "mountain") == ["p18"]


def test_searches_return_vectors_when_asked(store: VectorStore) -> None:
    def check(hits: list[Hit]) -> None:
        assert hits
        for hit in hits:
            assert hit.vector is not None and hit.vector.dtype == np.float32
            np.testing.assert_allclose(hit.vector, as_stored(store, VECS[hit.photo_id]), atol=1e-5)

    check(store.search(COLL, VECS["p14"], limit=3, with_vectors=True))
    check(store.keyword_search(COLL, query_vector("dog"), limit=3, with_vectors=True))
    check(store.recommend(COLL, [VECS["p10"]], [], limit=3, with_vectors=True))
    assert all(h.vector is None for h in store.search(COLL, VECS["p14"], limit=3))


def test_a_negative_example_pushes_a_photo_down(store: VectorStore) -> None:
    examples = SearchFilter(exclude_ids=("p10", "p11"))
    liked = ids(store.recommend(COLL, [VECS["p10"]], [], limit=N, filter=examples))
    assert liked[:2] == ["p12", "p13"] and len(liked) == N - 2
    # p12 is more like the negative example than like the positive one: last.
    hits = store.recommend(COLL, [VECS["p10"]], [VECS["p11"]], limit=N, filter=examples)
    assert ids(hits)[0] == "p13" and ids(hits)[-1] == "p12"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # A photo closer to a negative example scores below zero: a threshold of 0 drops it.
    kept = store.recommend(
        COLL, [VECS["p10"]], [VECS["p11"]], limit=N, filter=examples, score_threshold=0.0
    )
    assert "p13" in ids(kept) and "p12" not in ids(kept)
    assert all(h.score >= 0 for h in kept)
    page = store.recommend(COLL, [VECS["p10"]], [], limit=1, offset=1, filter=examples)
    assert ids(page) == ["p13"]
    # Best score: a photo like either positive example ranks first.
    both = store.recommend(COLL, [VECS["p14"], VECS["p10"]], [], limit=2, filter=examples)
    assert ids(both) == ["p14", "p15"]


def test_nearest_each_is_one_answer_per_vector_in_order(store: VectorStore) -> None:
    queries = np.stack([VECS["p14"], -VECS["p14"], VECS["p10"]])
    found = nearest_each(store, COLL, queries, score_threshold=0.9, exclude_ids=["p14"])
    assert len(found) == 3
    first, second, third = found
    assert first is not None and first.photo_id == "p15"  # p14 itself is excluded
    assert first.score == pytest.approx(0.995, abs=2e-3)
    assert first.payload[GROUP_FIELD] == "p14"
    assert second is None
    assert third is not None and third.photo_id == "p10"
    assert third.score == pytest.approx(1.0, abs=1e-3)
    # p16 is p14 at 0.85: found at a threshold of 0.8, not at 0.9.
    [near] = nearest_each(store, COLL, VECS["p16"][None], score_threshold=0.8, exclude_ids=["p16"])
    assert near is not None and near.photo_id == "p14"
    assert near.score == pytest.approx(0.85, abs=2e-3)
    assert nearest_each(
        store, COLL, VECS["p16"][None], score_threshold=0.9, exclude_ids=["p16"]
    ) == [None]
    assert nearest_each(store, COLL, np.zeros((0, DIM), np.float32), score_threshold=0.9) == []


def test_group_members_in_photo_id_order_within_the_filter(store: VectorStore) -> None:
    store.set_group(COLL, "p00", ["p17"])
    assert store.group_members(COLL, ["p14", "p00", "nothing"]) == {
        "p00": ["p00", "p01", "p02", "p17"],
        "p14": ["p14", "p15"],
    }
    assert store.group_members(COLL, ["p00", "p14"], filter=SearchFilter(photographer="ann")) == {
        "p00": ["p00", "p02"]
    }
    assert store.group_members(
        COLL, ["p00", "p14"], filter=SearchFilter(exclude_ids=("p00", "p15")), limit_each=2
    ) == {"p00": ["p01", "p02"], "p14": ["p14"]}
    assert store.group_members(COLL, ["p00"], limit_each=1) == {"p00": ["p00"]}
    assert store.group_members(COLL, ["p03"]) == {"p03": ["p03"]}
    assert store.group_members(COLL, []) == {}


def test_group_sizes_list_the_largest_groups_of_two_or_more(store: VectorStore) -> None:
    assert store.group_sizes(COLL, limit=10) == [("p00", 3), ("p14", 2)]
    store.set_group(COLL, "p07", ["p07", "p08"])  # a tie with p14's: then by group
    assert store.group_sizes(COLL, limit=10) == [("p00", 3), ("p07", 2), ("p14", 2)]
    assert store.group_sizes(COLL, limit=1) == [("p00", 3)]
    store.set_group(COLL, "p14", ["p00", "p01"])
    assert store.group_sizes(COLL, limit=10) == [("p14", 4), ("p07", 2)]


def old_edge_collection(path: Path) -> None:
    """A collection as the release before keyword search left it: no keywords vector, no
    group index, a metadata file with only the dimension."""
    folder = path / "collections"
    config = qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)}
    )
    shard = qe.EdgeShard.create(str(folder / COLL), config)
    points = [
        qe.Point(
            point_id(p.photo_id), {VECTOR_NAME: p.vector.tolist()}, as_json(metadata(p.photo_id))
        )
        for p in PHOTOS
    ]
    shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    shard.close()
    (folder / f"{COLL}.json").write_text(json.dumps({"dim": DIM}), encoding="utf-8")


def test_an_edge_collection_of_an_earlier_release_gets_its_keywords(tmp_path: Path) -> None:
    old_edge_collection(tmp_path)
    store = edge_store(tmp_path)
    try:
        assert ids(store.search(COLL, VECS["p03"], limit=1)) == ["p03"]
        with pytest.raises(KeywordsUnavailable):
            store.keyword_search(COLL, query_vector("lighthouse"), limit=N)
        # Writes go on meanwhile (an increment before the next sync), without keywords.
        store.upsert(
            COLL, [PhotoPoint("p20", elsewhere(20), metadata("p03") | {"photo_id": "p20"})]
        )
        store.set_payload(COLL, "p05", metadata("p05", title="Lighthouse street"))
        store.ensure_indexes(COLL)
        assert set(keywords(store, "lighthouse")) == {"p03", "p05", "p20"}
        assert keywords(store, "cafe") == ["p04"]
        # The old points keep their embeddings and payloads; groups can be counted.
        assert ids(store.search(COLL, VECS["p14"], limit=2)) == ["p14", "p15"]
        [old] = store.retrieve(COLL, ["p04"], with_vectors=True)
        assert old.payload == metadata("p04") and old.vector is not None
        store.set_group(COLL, "p14", ["p14", "p15"])
        assert store.group_sizes(COLL, limit=5) == [("p14", 2)]
        store.ensure_indexes(COLL)  # again: nothing to do
        assert set(keywords(store, "lighthouse")) == {"p03", "p05", "p20"}
    finally:
        store.close()
    reopened = edge_store(tmp_path)
    try:
        assert set(keywords(reopened, "lighthouse")) == {"p03", "p05", "p20"}
    finally:
        reopened.close()


@pytest.mark.parametrize("kind", ["qdrant-local", "qdrant-http"])
def test_a_server_collection_without_keywords_says_so(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    old = qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
    if kind == "qdrant-local":
        client = QdrantClient(location=":memory:")
        client.create_collection(COLL, vectors_config={VECTOR_NAME: old})
        store: VectorStore = QdrantStore(client, settings=QdrantSettings(url=":memory:"))
    else:
        store = server_store(kind, request, tmp_path)
        raw = QdrantClient(url=request.getfixturevalue("qdrant_url"), check_compatibility=False)
        raw.create_collection(COLL, vectors_config={VECTOR_NAME: old})
        raw.close()
    try:
        store.upsert(COLL, PHOTOS)  # written without keywords
        store.set_payloads(COLL, {"p03": metadata("p03", title="Windmill")})
        assert ids(store.search(COLL, VECS["p03"], limit=1)) == ["p03"]
        [p03] = store.retrieve(COLL, ["p03"])
        assert p03.payload == payload("p03", title="Windmill")
        for _ in range(2):  # the answer is remembered: the same again
            with pytest.raises(KeywordsUnavailable):
                store.keyword_search(COLL, query_vector("windmill"), limit=N)
        # A reindex builds a new collection, with keywords (here under the same name).
        store.drop_collection(COLL)
        store.create_collection(COLL, DIM)
        store.upsert(COLL, PHOTOS)
        assert keywords(store, "lighthouse") == ["p03"]
    finally:
        store.close()
