"""The Python client for internal applications, against the real API: real Triton, real Redis
and a real Qdrant Edge store over HTTP, the answers checked against the API's own."""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import photosearch_client
from core.settings_doc import default_settings
from model.triton_server import TritonServer
from photosearch_client import (
    ApiError,
    ApiUnreachable,
    AsyncClient,
    Client,
    ColorShare,
    DuplicatesPage,
    Event,
    EventsAccepted,
    FacetCounts,
    FacetValue,
    Health,
    ModelInfo,
    Photo,
    PhotoAttributes,
    Result,
    SearchPage,
    Suggestion,
    SuggestPage,
)
from photosearch_client.models import Duplicates, PhotoMetadata
from query_api.app import create_app
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    ApiServer,
    Indexed,
    api_settings,
    indexed_store,
    ok_json,
    serving,
)
from tests.support.imagehost import ImageHost

PHOTO = "photo004.jpg"


@dataclass
class Api:
    server: ApiServer
    indexed: Indexed
    host: ImageHost

    def raw(self, path: str, **params: Any) -> dict[str, Any]:
        """The API's own answer, over plain HTTP."""
        headers = {"X-API-Key": SEARCH_KEY}
        return ok_json(httpx.get(self.server.url + path, params=params, headers=headers))


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """12 real-photo variants embedded by Triton, the real app serving them, and a web server
    on loopback that the API may fetch an image from."""
    tmp = tmp_path_factory.mktemp("client")
    settings = api_settings(tmp / "data", triton.url, repository, image_url_allow=["127.0.0.1"])
    with (
        indexed_store(settings, tmp / "photos", 12) as (store, indexed),
        ImageHost(indexed.files[PHOTO].read_bytes()) as host,
        serving(settings, store) as server,
    ):
        yield Api(server, indexed, host)


@pytest.fixture
def client(api: Api) -> Iterator[Client]:
    with Client(api.server.url, SEARCH_KEY, timeout_s=30) as client:
        yield client


def ids(page: SearchPage) -> list[str]:
    return [result.id for result in page.results]


def test_text_search_answers_the_api_s_ranking_as_typed_results(api: Api, client: Client) -> None:
    page = client.search("a photo of a cat", mode="vector", limit=5, collapse=False)

    raw = api.raw("/v1/search", q="a photo of a cat", mode="vector", limit=5, collapse="false")
    assert ids(page) == [r["id"] for r in raw["results"]]
    assert [r.score for r in page.results] == pytest.approx([r["score"] for r in raw["results"]])
    assert isinstance(page, SearchPage) and all(isinstance(r, Result) for r in page.results)
    assert page.mode == "vector" and page.model_version == 1
    assert page.collection == api.indexed.collection
    assert page.cached is None  # told to admin keys only
    first = page.results[0]
    assert first.metadata == PhotoMetadata(**api.indexed.payloads[first.id])


def test_text_search_applies_filters_options_and_pages(api: Api, client: Client) -> None:
    def search(offset: int) -> SearchPage:
        return client.search(
            "street at night",
            mode="vector",
            not_=["food"],
            not_weight=0.3,
            tags_any=["cat", "city"],
            license="cc-by",
            created_from=date(2024, 1, 1),
            limit=2,
            offset=offset,
            collapse=False,
        )

    expected = {
        photo_id
        for photo_id, payload in api.indexed.payloads.items()
        if {"cat", "city"} & set(payload["tags"]) and payload["license"] == "cc-by"
    }
    assert len(expected) == 3  # photo000, photo002 and photo006 of the 12
    first = search(0)
    assert len(first.results) == 2 and first.next_offset == 2
    rest = search(first.next_offset)
    assert len(rest.results) == 1 and rest.next_offset is None
    assert set(ids(first)) | set(ids(rest)) == expected


def test_a_search_s_facet_counts_come_typed(api: Api, client: Client) -> None:
    page = client.search("street at night", facets=["license", "tags"], facet_limit=1)
    raw = api.raw("/v1/search", q="street at night", facets="license,tags", facet_limit=1)
    assert isinstance(page.facets, FacetCounts)
    assert page.facets.model_dump() == raw["facets"]
    # 12 photos, fewer than the pool: every one counted, half of them under each licence.
    assert (page.facets.over, page.facets.photos, page.facets.capped) == ("pool", 12, False)
    assert page.facets.fields["license"] == [FacetValue(value="cc-by", count=6)]
    assert client.search("street at night").facets is None


def test_a_search_s_boosts_reach_the_api(api: Api, client: Client) -> None:
    plain = client.search("street at night", mode="vector", collapse=False)
    off = client.search("street at night", mode="vector", collapse=False, boost_popularity=0)
    assert [(r.id, r.score) for r in off.results] == [(r.id, r.score) for r in plain.results]
    with pytest.raises(ApiError) as refused:
        client.search("street at night", boost_popularity=11)
    assert (refused.value.status, refused.value.code) == (422, "invalid_request")
    assert [d["loc"] for d in refused.value.details] == [["body", "boost_popularity"]]


def test_search_by_image_bytes_and_by_url_find_the_photo_first(api: Api, client: Client) -> None:
    data = api.indexed.files[PHOTO].read_bytes()
    by_bytes = client.search_image(data, filename=PHOTO, limit=3, collapse=False)
    assert by_bytes.results[0].id == PHOTO
    assert by_bytes.results[0].score == pytest.approx(1.0, abs=1e-3)
    assert by_bytes.mode is None

    by_url = client.search_image(url=f"{api.host.url}/photo.jpg", limit=3, collapse=False)
    assert ids(by_url) == ids(by_bytes)
    with pytest.raises(ValueError, match="exactly one"):
        client.search_image(data, url=f"{api.host.url}/photo.jpg")


def test_more_like_this_and_recommend_leave_their_examples_out(api: Api, client: Client) -> None:
    similar = client.similar(PHOTO, limit=5, collapse=False)
    raw = api.raw(f"/v1/photos/{PHOTO}/similar", limit=5, collapse="false")
    assert ids(similar) == [r["id"] for r in raw["results"]] and PHOTO not in ids(similar)

    others = ids(similar)
    recommended = client.recommend([PHOTO, others[0]], [others[1]], limit=5, collapse=False)
    assert recommended.results
    assert not {PHOTO, others[0], others[1]} & set(ids(recommended))


def test_a_photo_its_original_thumbnail_and_duplicates(api: Api, client: Client) -> None:
    photo = client.photo(PHOTO)
    assert isinstance(photo, Photo) and photo.id == PHOTO
    assert photo.metadata.title == api.indexed.payloads[PHOTO]["title"]

    original = client.original(PHOTO)
    assert original.data == api.indexed.files[PHOTO].read_bytes()
    assert original.media_type == "image/jpeg" and original.etag
    thumbnail = client.thumbnail(PHOTO)
    assert thumbnail.data[:3] == b"\xff\xd8\xff" and thumbnail.media_type == "image/jpeg"

    group = client.duplicates(PHOTO)
    assert isinstance(group, DuplicatesPage) and group.photo_id == PHOTO
    assert PHOTO not in [p.id for p in group.photos]
    assert (group.count, group.limit, group.next_offset) == (len(group.photos), 20, None)
    # Paged: the client sends limit and offset (the answer says which page it is).
    page = client.duplicates(PHOTO, limit=1, offset=5)
    assert (page.limit, page.offset) == (1, 5)


def test_the_model_and_health(api: Api, client: Client) -> None:
    model = client.model()
    assert isinstance(model, ModelInfo)
    assert model.model_version == 1 and model.collection == api.indexed.collection
    assert model == ModelInfo(**api.raw("/v1/model"))

    health = client.health()
    assert isinstance(health, Health) and health.ready and health.status == "ready"
    assert health.checks["triton"] == {"ok": True, "model_version": 1}


def test_errors_carry_the_status_code_and_message(api: Api, client: Client) -> None:
    with pytest.raises(ApiError) as missing:
        client.photo("no/such/photo.jpg")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert "no/such/photo.jpg" in missing.value.message

    with pytest.raises(ApiError) as invalid:
        client.search("a cat", limit=1000)
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_request")
    assert [d["loc"] for d in invalid.value.details] == [["body", "limit"]]
    assert "limit" in invalid.value.message

    with pytest.raises(ApiError) as keyword:
        client.search("a cat", mode="keyword", score_threshold=0.2)
    assert keyword.value.status == 422 and "score_threshold" in keyword.value.message

    with Client(api.server.url, "ps_not-a-key") as stranger, pytest.raises(ApiError) as unknown:
        stranger.search("a cat")
    assert (unknown.value.status, unknown.value.code) == (401, "unauthorized")

    with Client(api.server.url) as anonymous, pytest.raises(ApiError) as anonymous_error:
        anonymous.search("a cat")  # anonymous search is off here
    assert anonymous_error.value.status == 401


def test_an_admin_key_learns_whether_the_cache_answered(api: Api) -> None:
    with Client(api.server.url, ADMIN_KEY) as admin:
        admin.search("a bowl of soup", mode="vector")
        again = admin.search("a bowl of soup", mode="vector")
    assert again.cached is True


def test_no_answer_is_api_unreachable() -> None:
    # Nothing listens on port 1 (only root could bind it).
    with Client("http://127.0.0.1:1", SEARCH_KEY, timeout_s=5) as client:
        with pytest.raises(ApiUnreachable):
            client.health()


def test_events_on_a_search_s_results_are_kept_or_refused_with_the_reason(
    client: Client,
) -> None:
    page = client.search("a photo of a cat", mode="vector", limit=3, collapse=False)
    assert page.search_id is not None
    second = page.results[1]
    opened = Event(search_id=page.search_id, photo_id=second.id, rank=2, action="opened")
    kept = client.events([opened], session="0f8e6c1a-5b2d-4c3e-9a7f-1d2e3f4a5b6c")
    assert (kept.accepted, kept.searches) == (1, 1)
    wrong = opened.model_copy(update={"rank": 3})
    with pytest.raises(ApiError) as refused:
        client.events([wrong])
    assert refused.value.status == 422 and "rank" in str(refused.value)


async def test_the_async_client_answers_as_the_client_does(api: Api, client: Client) -> None:
    data = api.indexed.files[PHOTO].read_bytes()
    async with AsyncClient(api.server.url, SEARCH_KEY, timeout_s=30) as aclient:
        text, image, similar = await asyncio.gather(
            aclient.search("a photo of a cat", mode="vector", limit=5, collapse=False),
            aclient.search_image(data, limit=3, collapse=False),
            aclient.similar(PHOTO, limit=5, collapse=False),
        )
        photo, thumbnail, model, health = await asyncio.gather(
            aclient.photo(PHOTO), aclient.thumbnail(PHOTO), aclient.model(), aclient.health()
        )
        with pytest.raises(ApiError) as missing:
            await aclient.duplicates("no/such/photo.jpg")
    assert missing.value.status == 404
    same = client.search("a photo of a cat", mode="vector", limit=5, collapse=False)
    assert ids(text) == ids(same)
    assert image.results[0].id == PHOTO
    assert ids(similar) == ids(client.similar(PHOTO, limit=5, collapse=False))
    assert photo == client.photo(PHOTO) and thumbnail.media_type == "image/jpeg"
    assert model == client.model() and health.ready


def test_the_client_s_models_name_the_api_s_fields() -> None:
    """The client keeps no copy of the service's code: its models are checked against the
    schema the API serves, field by field."""
    models = create_app(default_settings()).openapi()["components"]["schemas"]
    mirrors: dict[str, type[BaseModel]] = {
        "SearchResponse": SearchPage,
        "Result": Result,
        "Photo": Photo,
        "PhotoMetadata": PhotoMetadata,
        "Duplicates": Duplicates,
        "DuplicatesResponse": DuplicatesPage,
        "ModelResponse": ModelInfo,
        "Event": Event,
        "EventsAccepted": EventsAccepted,
        "SuggestResponse": SuggestPage,
        "SuggestionItem": Suggestion,
        "FacetCounts": FacetCounts,
        "FacetValue": FacetValue,
        "PhotoAttributes": PhotoAttributes,
        "ColorShare": ColorShare,
    }
    for name, model in mirrors.items():
        assert set(model.model_fields) == set(models[name]["properties"]), name
        required = {n for n, f in model.model_fields.items() if f.is_required()}
        assert required <= set(models[name].get("required", [])), name


def test_the_client_imports_only_httpx_pydantic_and_the_standard_library() -> None:
    package = Path(photosearch_client.__file__).parent
    allowed = {"httpx", "pydantic", "photosearch_client", "__future__"}
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or top in sys.stdlib_module_names, f"{module.name}: {name}"
