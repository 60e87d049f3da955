"""The `facets` parameter, read from a query string or a JSON body, and the counts' answer, on
their own and through the search route over the in-process store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from core.vectorstore import VectorStore
from query_api.routes import search
from query_api.schemas.answers import SearchResponse
from query_api.schemas.facets import FACET_NAMES, FacetCounts, facet_names
from query_api.schemas.search import Page, TextSearch
from tests.unit.query_api.conftest import api_settings, router_app


@pytest.fixture(scope="module")
def client(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    settings = api_settings(tmp_path_factory.mktemp("api"))
    with TestClient(router_app(settings, shared_store, search.router)) as test_client:
        yield test_client


def test_names_come_comma_separated_repeated_or_both_each_once_in_order() -> None:
    assert facet_names(["tags,color", "license", " tags "]) == ["tags", "color", "license"]
    assert facet_names("orientation, auto_tags") == ["orientation", "auto_tags"]
    assert facet_names([]) == []
    assert Page(facets="photographer").facets == ["photographer"]
    assert Page().facets == [] and Page().facet_limit == 10


def test_an_unknown_name_is_refused_with_the_names_there_are() -> None:
    with pytest.raises(ValidationError) as refused:
        Page(facets=["tags,colour"])
    assert "unknown facet 'colour'" in str(refused.value)
    assert ", ".join(FACET_NAMES) in str(refused.value)


@pytest.mark.parametrize("limit", [0, 101, True])
def test_a_facet_limit_out_of_range_is_refused(limit: object) -> None:
    with pytest.raises(ValidationError):
        Page(facets=["tags"], facet_limit=limit)


def test_a_search_answers_no_facets_unless_asked() -> None:
    assert SearchResponse.model_fields["facets"].default is None
    counts = FacetCounts.model_validate(
        {
            "over": "pool",
            "photos": 2,
            "capped": False,
            "fields": {"tags": [{"value": "a", "count": 2}]},
        }
    )
    assert counts.model_dump() == {
        "over": "pool",
        "photos": 2,
        "capped": False,
        "fields": {"tags": [{"value": "a", "count": 2}]},
    }


def test_a_search_counts_the_facets_a_query_string_names(client: TestClient) -> None:
    answer = client.get("/v1/search?q=cat&mode=keyword&facets=tags,license&facets=tags")
    assert answer.status_code == 200, answer.text
    facets = answer.json()["facets"]
    # The keyword ranking of "cat": the two cats, tagged "cat"; no licence is stored.
    assert facets == {
        "over": "pool",
        "photos": 2,
        "capped": False,
        "fields": {"tags": [{"value": "cat", "count": 2}], "license": []},
    }


def test_a_json_body_names_them_as_a_list(client: TestClient) -> None:
    answer = client.post(
        "/v1/search", json={"q": "dog", "mode": "keyword", "facets": ["tags"], "facet_limit": 1}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["facets"]["fields"] == {"tags": [{"value": "dog", "count": 1}]}


def test_a_later_page_and_a_search_without_them_answer_none(client: TestClient) -> None:
    later = client.get(
        "/v1/search", params={"q": "cat", "mode": "keyword", "facets": "tags", "offset": 1}
    )
    plain = client.get("/v1/search", params={"q": "cat", "mode": "keyword"})
    assert later.status_code == plain.status_code == 200
    assert later.json()["facets"] is None and plain.json()["facets"] is None


def test_an_unknown_facet_in_a_query_string_is_a_422(client: TestClient) -> None:
    answer = client.get("/v1/search?q=cat&mode=keyword&facets=tags,colour")
    assert answer.status_code == 422
    assert "unknown facet 'colour': the facets are tags, auto_tags, color" in answer.text


def test_the_schema_documents_the_parameters() -> None:
    fields = TextSearch.model_json_schema()["properties"]
    assert "comma-separated" in fields["facets"]["description"]
    assert fields["facets"]["items"]["enum"] == list(FACET_NAMES)
    assert fields["facet_limit"]["maximum"] == 100
