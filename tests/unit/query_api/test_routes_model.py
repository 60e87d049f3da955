"""The model route: the live collection's model version, and its weights by file name only."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from core.vectorstore import VectorStore
from query_api.routes import model
from tests.unit.query_api.conftest import DIM, LIVE, api_settings, router_app


def test_the_model_route_names_the_weights_file_not_its_path(
    shared_store: VectorStore, tmp_path: Path
) -> None:
    with TestClient(router_app(api_settings(tmp_path), shared_store, model.router)) as client:
        answer = client.get("/v1/model")
    assert answer.status_code == 200
    assert answer.json() == {
        "model_version": 1,
        "collection": LIVE,
        "arch": "ViT-B-32",
        "weights": "laion2b.pt",
        "random_weights": False,
        "embedding_dim": DIM,
    }


def test_a_model_version_without_a_manifest_is_a_503(
    shared_store: VectorStore, tmp_path: Path
) -> None:
    settings = api_settings(tmp_path)
    (settings.repository / "manifest-1.json").unlink()
    with TestClient(router_app(settings, shared_store, model.router)) as client:
        answer = client.get("/v1/model")
    assert answer.status_code == 503
    assert "model version 1" in answer.text
