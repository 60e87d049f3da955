"""Facet counts (VectorStore.facet_counts) the same on Qdrant Edge, on qdrant-client's local
mode and on a Qdrant server (the stand-in of tests.support): each count equals the number of
matching photos, among the given ids, whose stored payload holds the value, counted here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from core.payload import PhotoPayload
from core.vectorstore import PhotoPoint, SearchFilter, VectorStore, collection_name
from tests.support.qdrant_server import qdrant_stand_in
from tests.support.stores import STORES, any_store

DIM = 8
COLL = collection_name(4, "facets")
TAGS = ("beach", "city", "dog", "food", "night", "snow")
COLORS = ("red", "blue", "green", "white", "black")
FIELDS = ("tags", "license", "photographer", "auto_tags", "colors", "orientation")


def payload(i: int) -> PhotoPayload:
    rng = np.random.default_rng(100 + i)
    body: PhotoPayload = {
        "title": f"photo {i}",
        # None to three tags: a photo holding a value twice still counts once.
        "tags": [str(t) for t in rng.choice(TAGS, i % 4)],
        "license": ("cc-by", "royalty-free", "editorial")[i % 3],
    }
    if i % 7:  # one photo in seven has no photographer: it counts under none
        body["photographer"] = ("ana", "ben", "chen", "dee", "eve")[(i * 3) % 5]
    if i % 5:  # and one in five was indexed before the visual attributes and automatic tags
        shares = dict(zip(rng.choice(COLORS, 2, replace=False), (0.7, 0.3), strict=True))
        body |= {
            "auto_tags": [str(t) for t in rng.choice(TAGS, 1 + i % 3, replace=False)],
            "colors": list(shares),
            "color_shares": {str(c): share for c, share in shares.items()},
            "orientation": ("landscape", "portrait", "square")[i % 3],
        }
    return body


def vector(i: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.random.default_rng(i).normal(size=DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


POINTS = [PhotoPoint(f"p{i:02d}", vector(i), payload(i)) for i in range(50)]
ALL = [p.photo_id for p in POINTS]


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    with qdrant_stand_in() as url:
        yield url


@pytest.fixture(scope="module", params=STORES)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VectorStore]:
    folder = tmp_path_factory.mktemp("facets")
    s = any_store(request.param, folder, COLL, DIM, lambda: request.getfixturevalue("qdrant_url"))
    s.upsert(COLL, POINTS)
    try:
        yield s
    finally:
        s.close()


def counted(
    store: VectorStore,
    field: str,
    photo_ids: Sequence[str],
    holds: Callable[[PhotoPayload], bool] = lambda payload: True,
) -> list[tuple[str, int]]:
    """The count of each value among these photos' stored payloads that pass `holds`: most
    first, equal counts by value."""
    values: Counter[str] = Counter()
    for photo in store.retrieve(COLL, photo_ids):
        if holds(photo.payload):
            held = photo.payload.get(field)
            values.update(
                set(held) if isinstance(held, list) else [] if held is None else [str(held)]
            )
    return sorted(values.items(), key=lambda vc: (-vc[1], vc[0]))


@pytest.mark.parametrize("field", FIELDS)
def test_every_photo_s_values_are_counted_exactly(store: VectorStore, field: str) -> None:
    assert store.facet_counts(COLL, field, limit=100) == counted(store, field, ALL)


def test_the_limit_keeps_the_most_held_values(store: VectorStore) -> None:
    every = counted(store, "photographer", ALL)
    assert len(every) == 5
    assert store.facet_counts(COLL, "photographer", limit=2) == every[:2]


def test_a_filter_counts_only_the_photos_that_match_it(store: VectorStore) -> None:
    only = SearchFilter(license="cc-by", tags_any=("dog", "snow"))

    def matches(p: PhotoPayload) -> bool:
        return bool(p["license"] == "cc-by" and {"dog", "snow"} & set(p["tags"]))

    for field in FIELDS:
        found = store.facet_counts(COLL, field, filter=only, limit=100)
        assert found == counted(store, field, ALL, matches), field
    assert store.facet_counts(COLL, "license", filter=only, limit=10) == [
        ("cc-by", sum(matches(p.payload) for p in POINTS))
    ]


def test_ids_count_only_those_photos_and_the_filter_narrows_them(store: VectorStore) -> None:
    some = ALL[5:35:2]
    for field in FIELDS:
        assert store.facet_counts(COLL, field, photo_ids=some, limit=100) == counted(
            store, field, some
        )
    editorial = SearchFilter(license="editorial", exclude_ids=("p11",))

    def matches(p: PhotoPayload) -> bool:
        return bool(p["license"] == "editorial" and p["photo_id"] != "p11")

    found = store.facet_counts(COLL, "tags", filter=editorial, photo_ids=some, limit=100)
    assert found == counted(store, "tags", some, matches)
    assert found  # the case counts something


def test_the_visual_filters_narrow_the_counts_of_visual_fields(store: VectorStore) -> None:
    mostly_red = SearchFilter(color="red", color_min_share=0.5, orientation="portrait")

    def matches(p: PhotoPayload) -> bool:
        return p.get("color_shares", {}).get("red", 0) >= 0.5 and p.get("orientation") == "portrait"

    for field in ("colors", "auto_tags", "orientation"):
        found = store.facet_counts(COLL, field, filter=mostly_red, photo_ids=ALL[:40], limit=20)
        assert found == counted(store, field, ALL[:40], matches), field
    red = sum(matches(p.payload) for p in POINTS)
    assert red > 0 and ("red", red) in store.facet_counts(
        COLL, "colors", filter=mostly_red, limit=5
    )


def test_no_photo_counts_no_value(store: VectorStore) -> None:
    assert store.facet_counts(COLL, "tags", photo_ids=[], limit=10) == []
    assert store.facet_counts(COLL, "tags", photo_ids=["unknown"], limit=10) == []
    nobody = SearchFilter(photographer="nobody")
    assert store.facet_counts(COLL, "tags", filter=nobody, limit=10) == []
