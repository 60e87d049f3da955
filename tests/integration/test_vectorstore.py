"""The vector store's behaviour, the same on Qdrant Edge, on qdrant-client's local mode, and on
a Qdrant server (local mode served over HTTP by tests.support.qdrant_server: none runs here)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.payload import PhotoPayload
from core.settings import QdrantSettings, Settings
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    CollectionNotFound,
    IndexedPoint,
    PhotoPoint,
    SearchFilter,
    SearchTuning,
    StoreError,
    VectorStore,
    collection_name,
    open_store,
)
from core.vectorstore.edge import EdgeStore
from core.vectorstore.qdrant import QdrantStore
from core.vectorstore.schema import CollectionSchema
from tests.support.qdrant_server import clear, qdrant_stand_in
from tests.support.stores import as_stored

DIM = 16
N = 40
COLL = collection_name(2, "a")
TAGS = ("cat", "dog", "beach", "city")


def unit_vectors(n: int, seed: int) -> Embeddings:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


VECS = unit_vectors(N, seed=7)


def payload(i: int) -> PhotoPayload:
    return {
        "photo_id": f"p{i}",
        "tags": [TAGS[i % 4], TAGS[(i // 4) % 4]],
        "photographer": ["ann", "bob", "cy"][i % 3],
        "license": "cc-by" if i % 5 else "rights-managed",
        "created_at": f"2024-01-{i % 28 + 1:02d}T12:00:00+00:00",
        "model_version": 2,
        "content_version": f"c{i}",
        "meta_hash": f"m{i}",
    }


PHOTOS = [PhotoPoint(f"p{i}", VECS[i], payload(i)) for i in range(N)]


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


@pytest.fixture(params=["edge", "qdrant-local", "qdrant-http"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    if request.param == "edge":
        s: VectorStore = edge_store(tmp_path / "vectors")
    elif request.param == "qdrant-local":
        s = open_store(Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=":memory:")))
    else:
        url: str = request.getfixturevalue("qdrant_url")
        clear(url)  # one server for the module: each test starts from an empty one
        s = open_store(Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=url)))
        assert isinstance(s, QdrantStore)
    yield s
    s.close()


@pytest.fixture
def filled(store: VectorStore) -> VectorStore:
    store.create_collection(COLL, DIM)
    store.upsert(COLL, PHOTOS)
    return store


def ids(hits: list[Any]) -> list[str]:
    return [h.photo_id for h in hits]


def test_open_store_picks_the_engine_from_settings(tmp_path: Path) -> None:
    edge = open_store(Settings(data_dir=tmp_path))
    local = open_store(Settings(data_dir=tmp_path, qdrant=QdrantSettings(url=":memory:")))
    assert isinstance(edge, EdgeStore) and isinstance(local, QdrantStore)
    assert (tmp_path / "vectors" / "collections").is_dir()
    edge.close()
    local.close()


def test_create_upsert_count(filled: VectorStore) -> None:
    assert filled.has_collection(COLL)
    assert not filled.has_collection(collection_name(9, "x"))
    assert filled.count(COLL) == N
    filled.create_collection(COLL, DIM)  # kept, not recreated
    assert filled.count(COLL) == N
    with pytest.raises(StoreError):
        filled.create_collection(COLL, DIM * 2)


def test_search_returns_nearest_first(filled: VectorStore) -> None:
    hits = filled.search(COLL, VECS[3], limit=5)
    expected = [f"p{i}" for i in np.argsort(-(VECS @ VECS[3]))[:5]]
    assert ids(hits) == expected
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].payload == payload(3)


FILTERS: list[tuple[SearchFilter, Callable[[PhotoPayload], bool]]] = [
    (SearchFilter(tags_any=("cat", "beach")), lambda p: bool({"cat", "beach"} & set(p["tags"]))),
    (SearchFilter(tags_all=("cat", "dog")), lambda p: {"cat", "dog"} <= set(p["tags"])),
    (SearchFilter(photographer="bob"), lambda p: p["photographer"] == "bob"),
    (SearchFilter(license="rights-managed"), lambda p: p["license"] == "rights-managed"),
    (
        SearchFilter(
            created_from=datetime(2024, 1, 5, tzinfo=UTC),
            created_to=datetime(2024, 1, 10, 12, tzinfo=UTC),
        ),
        lambda p: "2024-01-05" <= (p["created_at"] or "")[:10] <= "2024-01-10",
    ),
    (
        SearchFilter(exclude_ids=("p0", "p3", "p7")),
        lambda p: p["photo_id"] not in {"p0", "p3", "p7"},
    ),
    (
        SearchFilter(tags_any=("dog",), photographer="ann", exclude_ids=("p1",)),
        lambda p: "dog" in p["tags"] and p["photographer"] == "ann" and p["photo_id"] != "p1",
    ),
]


@pytest.mark.parametrize(
    ("search_filter", "keep"),
    FILTERS,
    ids=["tags_any", "tags_all", "photographer", "license", "created_at", "exclude", "combined"],
)
def test_every_filter_kind(
    filled: VectorStore, search_filter: SearchFilter, keep: Callable[[PhotoPayload], bool]
) -> None:
    expected = {p.photo_id for p in PHOTOS if keep(p.payload)}
    assert 0 < len(expected) < N
    hits = filled.search(COLL, VECS[0], limit=N, filter=search_filter)
    assert set(ids(hits)) == expected
    assert filled.search(COLL, VECS[0], limit=N, filter=SearchFilter()) != []


def test_offset_pages_and_score_threshold(filled: VectorStore) -> None:
    top10 = ids(filled.search(COLL, VECS[5], limit=10))
    page2 = ids(filled.search(COLL, VECS[5], limit=5, offset=5))
    assert page2 == top10[5:]
    sims = VECS @ VECS[5]
    threshold = float(np.sort(sims)[-6] + np.sort(sims)[-7]) / 2  # between the 6th and 7th
    hits = filled.search(COLL, VECS[5], limit=N, score_threshold=threshold)
    assert ids(hits) == top10[:6]
    assert all(h.score >= threshold for h in hits)


def test_upsert_of_the_same_photo_replaces_it(filled: VectorStore) -> None:
    moved = unit_vectors(1, seed=99)[0]
    filled.upsert(COLL, [PhotoPoint("p0", moved, {**payload(0), "tags": ["moved"]})])
    assert filled.count(COLL) == N
    assert ids(filled.search(COLL, moved, limit=1)) == ["p0"]
    [stored] = filled.retrieve(COLL, ["p0"])
    assert stored.payload["tags"] == ["moved"]


def test_delete_ignores_unknown_ids(filled: VectorStore) -> None:
    filled.delete(COLL, ["p1", "p2", "never-indexed"])
    assert filled.count(COLL) == N - 2
    assert filled.retrieve(COLL, ["p1", "p2"]) == []
    assert "p1" not in ids(filled.search(COLL, VECS[1], limit=N))


def test_set_payload_merges_and_keeps_the_vector(filled: VectorStore) -> None:
    filled.set_payload(COLL, "p4", {"tags": ["renamed"], "content_version": "c4", "meta_hash": "x"})
    [stored] = filled.retrieve(COLL, ["p4"], with_vectors=True)
    # The fields named are written, the others kept (the indexer's group label among them).
    assert stored.payload == payload(4) | {"tags": ["renamed"], "meta_hash": "x"}
    assert stored.vector is not None
    np.testing.assert_allclose(stored.vector, as_stored(filled, VECS[4]), atol=1e-5)
    assert ids(
        filled.search(COLL, VECS[4], limit=N, filter=SearchFilter(tags_any=("renamed",)))
    ) == ["p4"]


def test_points_list_exactly_what_is_stored(filled: VectorStore) -> None:
    filled.delete(COLL, ["p9"])
    expected = {IndexedPoint(f"p{i}", "", f"c{i}", f"m{i}", None) for i in range(N) if i != 9}
    listed = list(filled.points(COLL))
    assert len(listed) == N - 1 and set(listed) == expected


def sharded(i: int, shard: str) -> PhotoPoint:
    """A photo of the indexer: its key and the label of its shard in the payload."""
    key = f"{shard}/photo{i:03d}.jpg"
    body: PhotoPayload = {
        **payload(i),
        "shard": shard,
        "source_key": key,
        "source_uri": f"file:///x/{key}",
    }
    return PhotoPoint(f"p{i}", VECS[i], body)


@pytest.fixture
def shards(store: VectorStore) -> VectorStore:
    """Three shards of 10, 20 and 10 photos ("", "b", "c"), all 40 photos."""
    store.create_collection(COLL, DIM)
    labels = ["" if i < 10 else "b" if i < 30 else "c" for i in range(N)]
    store.upsert(COLL, [sharded(i, label) for i, label in enumerate(labels)])
    return store


def test_a_shard_is_read_by_its_label_and_counted_by_a_facet(shards: VectorStore) -> None:
    assert shards.shard_sizes(COLL) == {"": 10, "b": 20, "c": 10}
    b = list(shards.points(COLL, shard="b"))
    assert sorted(p.photo_id for p in b) == [f"p{i}" for i in range(10, 30)]
    assert {(p.shard, p.key.startswith("b/")) for p in b} == {("b", True)}
    assert b[0].content_version == f"c{b[0].photo_id[1:]}"
    # The first shard's label is the empty key: it is read like any other.
    assert sorted(p.photo_id for p in shards.points(COLL, shard="")) == [f"p{i}" for i in range(10)]
    assert list(shards.points(COLL, shard="nothing")) == []
    assert list(shards.points(COLL, unlabelled=True)) == []
    shards.upsert(COLL, [PhotoPoint("old", VECS[0], payload(0) | {"photo_id": "old"})])
    [old] = shards.points(COLL, unlabelled=True)
    assert (old.photo_id, old.shard, old.key) == ("old", None, "")


def test_points_are_found_by_id_and_by_key(shards: VectorStore) -> None:
    by_id = shards.points_by_id(COLL, ["p3", "missing", "p33"])
    assert sorted((p.photo_id, p.shard) for p in by_id) == [("p3", ""), ("p33", "c")]
    by_key = shards.points_by_key(COLL, ["b/photo012.jpg", "c/photo031.jpg", "nowhere.jpg"])
    assert sorted(p.photo_id for p in by_key) == ["p12", "p31"]
    assert shards.points_by_id(COLL, []) == [] and shards.points_by_key(COLL, []) == []


def test_delete_in_shard_spares_a_photo_that_moved_to_another_shard(shards: VectorStore) -> None:
    shards.set_shard(COLL, "c", ["p12"])  # p12 moved from b to c meanwhile
    shards.delete_in_shard(COLL, "b", ["p11", "p12", "p35"])  # p35 was never b's
    assert shards.count(COLL) == N - 1
    assert shards.shard_sizes(COLL) == {"": 10, "b": 18, "c": 11}
    [kept] = shards.retrieve(COLL, ["p12"])
    # set_shard relabels and keeps everything else of the payload.
    assert kept.payload["shard"] == "c"
    assert kept.payload["source_key"] == "b/photo012.jpg" and kept.payload["meta_hash"] == "m12"


def test_set_payloads_rewrites_many_photos_and_keeps_their_vectors(shards: VectorStore) -> None:
    shards.set_payloads(COLL, {f"p{i}": {"shard": "z", "title": f"t{i}"} for i in range(5)})
    assert shards.shard_sizes(COLL)["z"] == 5
    [p2] = shards.retrieve(COLL, ["p2"], with_vectors=True)
    assert p2.payload == sharded(2, "").payload | {"shard": "z", "title": "t2"}
    assert p2.vector is not None and np.allclose(p2.vector, as_stored(shards, VECS[2]), atol=1e-6)


def test_a_bulk_loaded_collection_is_searchable_once_its_index_is_built(store: VectorStore) -> None:
    store.create_collection(COLL, DIM, bulk=True)
    store.ensure_indexes(COLL)  # a second time changes nothing
    store.upsert(COLL, PHOTOS)
    store.finish_bulk_load(COLL)
    assert store.index_ready(COLL)
    hits = store.search(COLL, VECS[4], limit=1)
    assert hits[0].photo_id == "p4" and hits[0].score > 0.99


def test_retrieve_keeps_the_order_asked(filled: VectorStore) -> None:
    got = filled.retrieve(COLL, ["p7", "p2", "missing", "p5"])
    assert [s.photo_id for s in got] == ["p7", "p2", "p5"]
    assert all(s.vector is None for s in got)
    with_vectors = filled.retrieve(COLL, ["p5", "p7"], with_vectors=True)
    for stored, i in zip(with_vectors, (5, 7), strict=True):
        assert stored.vector is not None and stored.vector.dtype == np.float32
        np.testing.assert_allclose(stored.vector, as_stored(filled, VECS[i]), atol=1e-5)
        assert stored.payload == payload(i)


def test_aliases_swap_atomically(filled: VectorStore) -> None:
    old, new = COLL, collection_name(3, "b")
    filled.create_collection(new, DIM)
    filled.upsert(new, PHOTOS[:3])
    filled.set_aliases({LIVE_ALIAS: old})
    assert filled.resolve(LIVE_ALIAS) == old and filled.count(LIVE_ALIAS) == N
    filled.set_aliases({LIVE_ALIAS: new, PREVIOUS_ALIAS: old})
    assert filled.aliases() == {LIVE_ALIAS: new, PREVIOUS_ALIAS: old}
    assert filled.resolve(LIVE_ALIAS) == new and filled.resolve(old) == old
    assert ids(filled.search(LIVE_ALIAS, VECS[1], limit=1)) == ["p1"]
    assert filled.count(LIVE_ALIAS) == 3
    with pytest.raises(CollectionNotFound):  # one bad target: nothing changes
        filled.set_aliases({PREVIOUS_ALIAS: None, LIVE_ALIAS: collection_name(9, "gone")})
    assert filled.aliases() == {LIVE_ALIAS: new, PREVIOUS_ALIAS: old}
    filled.set_aliases({PREVIOUS_ALIAS: None})
    assert filled.aliases() == {LIVE_ALIAS: new}
    with pytest.raises(CollectionNotFound):
        filled.resolve("no-such-name")


def test_drop_collection_is_refused_while_aliased(filled: VectorStore) -> None:
    filled.set_aliases({PREVIOUS_ALIAS: COLL})
    with pytest.raises(StoreError):
        filled.drop_collection(COLL)
    assert filled.count(COLL) == N
    filled.set_aliases({PREVIOUS_ALIAS: None})
    filled.drop_collection(COLL)
    assert not filled.has_collection(COLL)
    with pytest.raises(CollectionNotFound):
        filled.count(COLL)
    filled.create_collection(COLL, DIM)  # the name is free again
    assert filled.count(COLL) == 0


def test_collections_describe_each_one(filled: VectorStore) -> None:
    small = collection_name(1, "old")
    filled.create_collection(small, 8)
    filled.upsert(small, [PhotoPoint("q", unit_vectors(1, seed=3)[0][:8] * 2, {})])
    filled.set_aliases({LIVE_ALIAS: COLL, PREVIOUS_ALIAS: small})
    infos = filled.collections()
    assert [(c.name, c.model_version, c.dim, c.points, c.aliases) for c in infos] == [
        (small, 1, 8, 1, (PREVIOUS_ALIAS,)),
        (COLL, 2, DIM, N, (LIVE_ALIAS,)),
    ]


def test_edge_data_and_aliases_survive_reopening(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.create_collection(COLL, DIM)
    store.upsert(COLL, PHOTOS)
    store.set_aliases({LIVE_ALIAS: COLL})
    before = store.search(LIVE_ALIAS, VECS[8], limit=5)
    store.close()
    with pytest.raises(StoreError):
        store.count(COLL)
    reopened = edge_store(tmp_path)
    assert reopened.aliases() == {LIVE_ALIAS: COLL}
    assert reopened.search(LIVE_ALIAS, VECS[8], limit=5) == before
    assert [(c.name, c.dim, c.points) for c in reopened.collections()] == [(COLL, DIM, N)]
    reopened.close()


def test_edge_upserts_survive_a_killed_process(tmp_path: Path) -> None:
    script = (
        "import os, signal, numpy as np\n"
        "from tests.integration.test_vectorstore import COLL, DIM, PHOTOS, edge_store\n"
        f"s = edge_store(__import__('pathlib').Path({str(tmp_path)!r}))\n"
        "s.create_collection(COLL, DIM)\n"
        "s.upsert(COLL, PHOTOS)\n"
        "s.delete(COLL, ['p0'])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    assert done.returncode == -9
    store = edge_store(tmp_path)
    assert store.count(COLL) == N - 1
    assert ids(store.search(COLL, VECS[3], limit=1)) == ["p3"]
    store.close()


def test_edge_searches_while_another_thread_upserts(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.create_collection(COLL, DIM)
    store.upsert(COLL, PHOTOS)
    extra = unit_vectors(200, seed=11)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for start in range(0, 200, 10):
                batch = range(start, start + 10)
                store.upsert(COLL, [PhotoPoint(f"x{i}", extra[i], {"tags": ["x"]}) for i in batch])
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    searches = 0
    while writer.is_alive() or searches < 20:
        assert ids(
            store.search(COLL, VECS[6], limit=1, filter=SearchFilter(photographer="ann"))
        ) == ["p6"]
        searches += 1
    writer.join()
    assert errors == []
    assert store.count(COLL) == N + 200
    store.close()


def test_edge_optimize_keeps_search_results(tmp_path: Path) -> None:
    store = edge_store(tmp_path)
    store.create_collection(COLL, DIM)
    store.upsert(COLL, PHOTOS)
    queries = unit_vectors(5, seed=5)
    before = [ids(store.search(COLL, q, limit=10)) for q in queries]
    store.optimize(COLL)
    assert [ids(store.search(COLL, q, limit=10)) for q in queries] == before
    store.close()
