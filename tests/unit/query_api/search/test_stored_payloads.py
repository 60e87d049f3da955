"""The searches read the payloads earlier releases stored as they did: the same answers, groups,
order, facet counts, boosted scores and ETags, with and without the keys added since."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.payload import payload_of
from core.vectorstore import Hit, StoredPhoto
from core.vectorstore.boosts import boosted_score
from core.vectorstore.engine import Boosted
from query_api.images.photos import etag_of, media_type
from query_api.schemas.answers import Photo
from query_api.schemas.attributes import ColorShare, PhotoAttributes, attributes_of
from query_api.search.facets import FIELDS, count_values
from query_api.search.pipeline import to_photo
from query_api.search.ranking import group_of, newest_first
from tests.support.payloads import OLDEST, PREVIOUS

HITS = [Hit("mill.jpg", 0.9, payload_of(OLDEST)), Hit("harbour.jpg", 0.5, payload_of(PREVIOUS))]


def test_a_result_answers_with_the_fields_its_payload_holds() -> None:
    harbour = Photo(**to_photo("/api", "harbour.jpg", payload_of(PREVIOUS)))
    assert harbour.model_dump(mode="json") == {
        "id": "harbour.jpg",
        "metadata": {
            "title": "Harbour at dawn",
            "tags": ["boat", "sea"],
            "photographer": "Ann Lee",
            "license": "cc-by",
            "created_at": "2024-05-01T06:30:00+00:00",
            "extra": {"camera": "leica"},
        },
        "model_version": 2,
        "indexed_at": "2026-01-02T03:04:05+00:00",
        "auto_tags": ["water", "boat"],
        "attributes": {
            "width": 6000,
            "height": 4000,
            "aspect_ratio": 1.5,
            "orientation": "landscape",
            "colors": [{"name": "blue", "share": 0.62}, {"name": "grey", "share": 0.3}],
            "copy_space": False,
        },
        "image_url": "/api/v1/photos/harbour.jpg/image",
        "thumbnail_url": "/api/v1/photos/harbour.jpg/thumbnail",
    }


def test_a_result_of_the_first_release_answers_without_tags_or_attributes() -> None:
    mill = Photo(**to_photo("/api", "mill.jpg", payload_of(OLDEST)))
    assert mill.model_dump(mode="json") == {
        "id": "mill.jpg",
        "metadata": {
            "title": "Old mill",
            "tags": ["mill"],
            "photographer": None,
            "license": None,
            "created_at": None,
            "extra": {},
        },
        "model_version": 1,
        "indexed_at": "2025-11-22T10:00:00+00:00",
        "auto_tags": [],
        "attributes": None,
        "image_url": "/api/v1/photos/mill.jpg/image",
        "thumbnail_url": "/api/v1/photos/mill.jpg/thumbnail",
    }


def test_attributes_read_the_stored_shares_of_the_listed_colours() -> None:
    assert attributes_of(payload_of(PREVIOUS)) == PhotoAttributes(
        width=6000,
        height=4000,
        aspect_ratio=1.5,
        orientation="landscape",
        colors=[ColorShare(name="blue", share=0.62), ColorShare(name="grey", share=0.3)],
        copy_space=False,
    )
    assert attributes_of(payload_of(OLDEST)) is None


def test_groups_dates_and_facets_read_what_each_payload_holds() -> None:
    assert [group_of(hit) for hit in HITS] == ["mill.jpg", "harbour.jpg"]  # ungrouped: its own
    assert [hit.photo_id for hit in newest_first(HITS)] == ["harbour.jpg", "mill.jpg"]
    assert count_values(HITS, list(FIELDS), 10) == {
        "tags": [("boat", 1), ("mill", 1), ("sea", 1)],
        "auto_tags": [("boat", 1), ("water", 1)],
        "color": [("blue", 1), ("grey", 1)],
        "orientation": [("landscape", 1)],
        "license": [("cc-by", 1)],
        "photographer": [("Ann Lee", 1)],
    }


def test_a_boost_reads_the_stored_date_and_popularity() -> None:
    boost = Boosted(0.3, 180 * 86400.0, datetime(2026, 1, 1, tzinfo=UTC), 0.2, 4.0)
    assert [boosted_score(hit.score, hit.payload, boost) for hit in HITS] == pytest.approx(
        [0.9, 0.6286692931780234]  # the first without a date or popularity: its score alone
    )


def test_an_original_s_etag_and_type_come_from_its_stored_version_and_address() -> None:
    harbour, mill = (StoredPhoto(p["photo_id"], payload_of(p)) for p in (PREVIOUS, OLDEST))
    assert etag_of(harbour, "original") == '"2048b78e0063ef13632e1e94f4a7f88b"'
    assert etag_of(mill, "original") == '"15cde31ec6b6a043d9a2665981141924"'
    assert media_type(harbour) == media_type(mill) == "image/jpeg"
