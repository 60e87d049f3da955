"""The visual and automatic-tag filters (core/vectorstore/filters.py) narrow a search the same
on Qdrant Edge, on qdrant-client's local mode and on a Qdrant server (the stand-in of
tests.support): every search's hits are exactly the photos whose payload passes the filter,
computed here from the payloads; a photo indexed before it had attributes matches none."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from core.keywords import query_vector
from core.payload import PhotoPayload
from core.vectorstore import PhotoPoint, SearchFilter, VectorStore, collection_name
from tests.support.qdrant_server import qdrant_stand_in
from tests.support.stores import STORES, any_store

DIM = 8
COLL = collection_name(3, "visual")


def attributes(
    width: int,
    height: int,
    shares: dict[str, float],
    copy_space: bool,
    auto_tags: list[str],
) -> PhotoPayload:
    ratio = width / height
    orientation = "square" if abs(ratio - 1) <= 0.05 else "landscape" if ratio > 1 else "portrait"
    return {
        "width": width,
        "height": height,
        "aspect_ratio": round(ratio, 3),
        "orientation": orientation,
        "colors": [name for name, share in shares.items() if share >= 0.05],
        "color_shares": shares,
        "copy_space": int(copy_space),  # stored as 0 or 1 (engine.Flag)
        "auto_tags": auto_tags,
    }


# Photo id -> its payload's visual fields and automatic tags; "old" was indexed before them.
PAYLOADS: dict[str, PhotoPayload] = {
    "sky": attributes(6000, 4000, {"blue": 0.82, "white": 0.15, "grey": 0.03}, True, ["sky"]),
    "poppy": attributes(
        3000, 4500, {"green": 0.55, "red": 0.30, "black": 0.15}, False, ["flower", "field"]
    ),
    "bus": attributes(1200, 800, {"red": 0.62, "grey": 0.30, "black": 0.08}, True, ["bus"]),
    "speck": attributes(
        1000, 1000, {"white": 0.9, "grey": 0.08, "red": 0.02}, True, ["flower", "studio"]
    ),
    "tile": attributes(960, 1000, {"teal": 0.5, "white": 0.5}, False, ["pattern"]),
    "old": {},
}


def unit(seed: int) -> list[float]:
    v = np.random.default_rng(seed).normal(size=DIM)
    return list(v / np.linalg.norm(v))


POINTS = [
    PhotoPoint(pid, np.asarray(unit(i), dtype=np.float32), {"photo_id": pid, "title": pid} | p)
    for i, (pid, p) in enumerate(PAYLOADS.items())
]


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    with qdrant_stand_in() as url:
        yield url


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = any_store(request.param, tmp_path, COLL, DIM, lambda: request.getfixturevalue("qdrant_url"))
    s.upsert(COLL, POINTS)
    yield s
    s.close()


def expected(passes: Callable[[PhotoPayload], bool]) -> set[str]:
    return {pid for pid, p in PAYLOADS.items() if p and passes(p)}


def found(store: VectorStore, f: SearchFilter) -> set[str]:
    hits = store.search(COLL, np.asarray(unit(99), dtype=np.float32), limit=50, filter=f)
    return {hit.photo_id for hit in hits}


CASES: list[tuple[SearchFilter, Callable[[PhotoPayload], bool]]] = [
    (SearchFilter(color="red"), lambda p: p["color_shares"].get("red", 0) >= 0.01),
    (
        SearchFilter(color="red", color_min_share=0.25),
        lambda p: p["color_shares"].get("red", 0) >= 0.25,
    ),
    (
        SearchFilter(color="red", color_min_share=0.5),
        lambda p: p["color_shares"].get("red", 0) >= 0.5,
    ),
    (SearchFilter(color="purple"), lambda p: False),
    (SearchFilter(orientation="portrait"), lambda p: p["orientation"] == "portrait"),
    (SearchFilter(orientation="square"), lambda p: p["orientation"] == "square"),
    (SearchFilter(min_width=1200), lambda p: p["width"] >= 1200),
    (SearchFilter(min_width=1201), lambda p: p["width"] >= 1201),
    (SearchFilter(min_height=1000), lambda p: p["height"] >= 1000),
    (
        SearchFilter(min_width=2000, min_height=4000),
        lambda p: p["width"] >= 2000 and p["height"] >= 4000,
    ),
    (SearchFilter(copy_space=True), lambda p: p["copy_space"] == 1),
    (SearchFilter(copy_space=False), lambda p: p["copy_space"] == 0),
    (SearchFilter(auto_tags_all=("flower",)), lambda p: "flower" in p["auto_tags"]),
    (
        SearchFilter(auto_tags_all=("flower", "field")),
        lambda p: {"flower", "field"} <= set(p["auto_tags"]),
    ),
    (
        SearchFilter(color="white", color_min_share=0.1, copy_space=True, orientation="landscape"),
        lambda p: (
            p["color_shares"].get("white", 0) >= 0.1
            and p["copy_space"] == 1
            and p["orientation"] == "landscape"
        ),
    ),
]


@pytest.mark.parametrize(("f", "passes"), CASES, ids=[repr(f) for f, _ in CASES])
def test_each_filter_keeps_exactly_the_photos_whose_payload_passes_it(
    store: VectorStore, f: SearchFilter, passes: Callable[[PhotoPayload], bool]
) -> None:
    assert found(store, f) == expected(passes)


def test_the_filters_narrow_keyword_search_too(store: VectorStore) -> None:
    hits = store.keyword_search(
        COLL, query_vector("bus sky poppy"), limit=10, filter=SearchFilter(copy_space=True)
    )
    assert {hit.photo_id for hit in hits} == {"bus", "sky"}
    # Without a filter the photo without attributes is found like any other.
    assert "old" in found(store, SearchFilter())
