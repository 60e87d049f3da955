"""Every kind of search opens with the one dependency and runs through the one pipeline: the
stages each reports in `Server-Timing`, over the search and photo routes on the in-process
store.

Triton cannot run in a unit test: the text encoder is the stand-in of fixed vectors
(tests/unit/query_api/conftest.py) and the image encoder one of mean colours, both put in the
replica's services in place of its Triton client. Everything else is real: Qdrant Edge, the
query cache over the session's Redis, the admission slots, the image threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, get_args

import numpy as np
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from PIL import Image

from core.embedding.arrays import Embeddings, Pixels
from core.embedding.images import ImageLimits
from core.embedding.manifest import ModelManifest
from core.vectorstore import VectorStore
from query_api.routes import photos, search
from query_api.schemas.answers import SearchResponse
from query_api.search.opening import SearchesDep
from query_api.services import Services
from tests.support.images import encode
from tests.support.models import stand_in_manifest
from tests.unit.query_api.conftest import DIM, FixedEncoder, api_settings, router_app

# What the middleware adds to every request's timed stages.
ADDED = ["other", "total"]


class MeanColour:
    """Triton's image encoder stood in for: an image's vector is its mean colour and a
    constant, unit length."""

    image_limits = ImageLimits()

    def manifest(self, version: int) -> ModelManifest:
        return stand_in_manifest(version, DIM)

    async def encode_images(
        self,
        pixels: Sequence[Pixels] | Pixels,
        *,
        model_version: int,
        timeout_s: float | None = None,
        chunk: int = 0,
    ) -> Embeddings:
        batch = np.asarray(pixels, dtype=np.float32) / 255
        vectors = np.column_stack([batch.mean(axis=(1, 2)), np.full(len(batch), 0.5)])
        unit: Embeddings = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(
            np.float32
        )
        return unit

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def client(
    grouped_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    app = router_app(
        api_settings(tmp_path_factory.mktemp("api")), grouped_store, search.router, photos.router
    )
    with TestClient(app) as test_client:
        services: Services = app.state.services
        services.queries.encoder = FixedEncoder()
        triton, services.embedder = services.embedder, MeanColour()  # type: ignore[assignment]
        try:
            yield test_client
        finally:
            services.embedder = triton


def stages(answer: Any) -> list[str]:
    """The stages `Server-Timing` names, in its order."""
    assert answer.status_code == 200, answer.text
    return [part.split(";")[0].strip() for part in answer.headers["Server-Timing"].split(",")]


def test_a_text_search_by_embedding_reports_its_cache_admission_and_embedding(
    client: TestClient,
) -> None:
    # The only search of "a kitten" in the module: its embedding is not in the cache yet.
    answer = client.get("/v1/search", params={"q": "a kitten", "mode": "vector"})
    embedded = ["resolve", "cache", "admit", "tokenize", "embed", "search", "rerank"]
    assert stages(answer) == [*embedded, *ADDED]


def test_a_text_search_by_words_reports_no_embedding(client: TestClient) -> None:
    answer = client.post("/v1/search", json={"q": "dog", "mode": "keyword"})
    assert stages(answer) == ["resolve", "search", "rerank", *ADDED]


def test_an_image_search_reports_its_admission_decode_and_embedding(client: TestClient) -> None:
    image = encode(Image.new("RGB", (32, 32), (200, 40, 40)), "PNG")
    answer = client.post("/v1/search/image", files={"file": ("red.png", image, "image/png")})
    embedded = ["resolve", "admit", "decode", "embed", "search", "rerank"]
    assert stages(answer) == [*embedded, *ADDED]


def test_more_like_this_reports_the_stored_vector_it_retrieves(client: TestClient) -> None:
    answer = client.get("/v1/photos/dog-1/similar")
    assert stages(answer) == ["resolve", "retrieve", "search", "rerank", *ADDED]


def test_a_recommendation_reports_the_stored_vectors_it_retrieves(client: TestClient) -> None:
    answer = client.get("/v1/search/recommend", params={"positive": "cat-1", "collapse": "false"})
    assert stages(answer) == ["resolve", "retrieve", "search", *ADDED]


def test_every_search_route_opens_with_the_one_dependency() -> None:
    (opening,) = (m.dependency for m in get_args(SearchesDep)[1:])
    routes = [
        route
        for route in [*search.router.routes, *photos.router.routes]
        if isinstance(route, APIRoute) and route.response_model is SearchResponse
    ]
    assert {(route.path, method) for route in routes for method in route.methods or ()} == {
        ("/v1/search", "GET"),
        ("/v1/search", "POST"),
        ("/v1/search/recommend", "GET"),
        ("/v1/search/recommend", "POST"),
        ("/v1/search/image", "POST"),
        ("/v1/photos/{photo_id:path}/similar", "GET"),
    }
    for route in routes:
        assert opening in [d.call for d in route.dependant.dependencies], route.path
