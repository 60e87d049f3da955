"""The visual filters and attributes at the API: a colour by name or hex, an unknown colour
refused naming the palette, the filters narrowing a search over the in-process store, and each
result's attributes read from its payload (null for a photo indexed before them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from core.embedding.attributes import NAMES
from core.payload import PhotoPayload
from core.vectorstore import SearchFilter, VectorStore
from query_api.routes import search
from query_api.schemas.attributes import PhotoAttributes, attributes_of, palette_color
from query_api.schemas.search import Filters, TextSearch
from tests.unit.query_api.conftest import LIVE, live_store, result_ids, router_client

# What the indexer wrote for three of the live collection's photos; boat-1 has none.
VISUAL: dict[str, PhotoPayload] = {
    "cat-1": {
        "width": 4000,
        "height": 3000,
        "aspect_ratio": 1.333,
        "orientation": "landscape",
        "colors": ["red", "white"],
        "color_shares": {"red": 0.7, "white": 0.3},
        "copy_space": 1,
        "auto_tags": ["cat", "sofa"],
    },
    "cat-2": {
        "width": 1000,
        "height": 1500,
        "aspect_ratio": 0.667,
        "orientation": "portrait",
        "colors": ["brown", "red"],
        "color_shares": {"brown": 0.9, "red": 0.06, "grey": 0.04},
        "copy_space": 0,
        "auto_tags": ["cat"],
    },
    "dog-1": {
        "width": 2000,
        "height": 2000,
        "aspect_ratio": 1.0,
        "orientation": "square",
        "colors": ["blue"],
        "color_shares": {"blue": 1.0},
        "copy_space": 1,
        "auto_tags": ["dog"],
    },
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    store: VectorStore = live_store(tmp_path_factory.mktemp("store"))
    store.set_payloads(LIVE, VISUAL)
    try:
        yield from router_client(store, tmp_path_factory.mktemp("api"), search.router)
    finally:
        store.close()


def found(client: TestClient, **filters: Any) -> list[str]:
    answer = client.get("/v1/search", params={"q": "cat dog boat", "mode": "keyword", **filters})
    assert answer.status_code == 200, answer.text
    return sorted(result_ids(answer.json()))


@pytest.mark.parametrize(
    ("value", "name"),
    [("red", "red"), ("Teal", "teal"), ("#ff0000", "red"), ("1e90ff", "blue"), (None, None)],
)
def test_a_colour_is_a_palette_name_or_the_nearest_to_a_hex(value: str | None, name: str) -> None:
    assert palette_color(value) == name
    assert Filters(color=value).to_store().color == name


@pytest.mark.parametrize("value", ["chartreuse", "#12345", "#gg0000", "rouge"])
def test_an_unknown_colour_is_refused_naming_the_palette(value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Filters(color=value)
    assert ", ".join(NAMES) in str(refused.value) and "#1e90ff" in str(refused.value)


def test_the_filters_reach_the_store_and_default_to_a_tenth_of_the_photo() -> None:
    f = TextSearch.model_validate(
        {
            "q": "x",
            "color": "0000ff",
            "auto_tags_all": ["cat"],
            "orientation": "portrait",
            "min_width": 800,
            "min_height": 600,
            "copy_space": "false",
        }
    ).to_store()
    assert f == SearchFilter(
        auto_tags_all=("cat",),
        color="blue",
        color_min_share=0.05,
        orientation="portrait",
        min_width=800,
        min_height=600,
        copy_space=False,
    )
    for wrong in ({"orientation": "diagonal"}, {"min_width": 0}, {"color_min_share": 1.5}):
        with pytest.raises(ValidationError):
            Filters.model_validate(wrong)


def test_attributes_come_from_the_payload_and_none_from_an_older_one() -> None:
    assert attributes_of({"title": "old"}) is None
    attributes = attributes_of(VISUAL["cat-2"])
    assert attributes == PhotoAttributes.model_validate(
        {
            "width": 1000,
            "height": 1500,
            "aspect_ratio": 0.667,
            "orientation": "portrait",
            "colors": [{"name": "brown", "share": 0.9}, {"name": "red", "share": 0.06}],
            "copy_space": False,
        }
    )


def test_the_visual_filters_narrow_a_search(client: TestClient) -> None:
    assert found(client) == ["boat-1", "cat-1", "cat-2", "dog-1"]
    # Red covering 5% of the photo at least, the default: where its `colors` list starts.
    assert found(client, color="#e01010") == ["cat-1", "cat-2"]
    assert found(client, color="red", color_min_share=0.1) == ["cat-1"]
    assert found(client, orientation="square") == ["dog-1"]
    assert found(client, min_width=1500) == ["cat-1", "dog-1"]
    assert found(client, min_width=1500, min_height=2500) == ["cat-1"]
    assert found(client, copy_space="true") == ["cat-1", "dog-1"]
    assert found(client, copy_space="false") == ["cat-2"]
    assert found(client, auto_tags_all=["cat", "sofa"]) == ["cat-1"]
    by_post = client.post(
        "/v1/search", json={"q": "cat dog boat", "mode": "keyword", "color": "blue"}
    )
    assert result_ids(by_post.json()) == ["dog-1"]


def test_each_result_carries_its_attributes(client: TestClient) -> None:
    answer = client.get("/v1/search", params={"q": "cat dog boat", "mode": "keyword"}).json()
    by_id = {result["id"]: result["attributes"] for result in answer["results"]}
    assert by_id["boat-1"] is None
    assert by_id["cat-1"] == {
        "width": 4000,
        "height": 3000,
        "aspect_ratio": 1.333,
        "orientation": "landscape",
        "colors": [{"name": "red", "share": 0.7}, {"name": "white", "share": 0.3}],
        "copy_space": True,
    }


def test_an_unknown_colour_is_a_422_naming_the_palette(client: TestClient) -> None:
    answer = client.get("/v1/search", params={"q": "cat", "mode": "keyword", "color": "mauve"})
    assert answer.status_code == 422
    assert "unknown colour 'mauve'" in answer.text and ", ".join(NAMES) in answer.text
