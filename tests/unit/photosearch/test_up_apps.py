"""`up`'s own processes: the API with the worker inside on the embedded store, apart with a
Qdrant server, then beat."""

from __future__ import annotations

from pathlib import Path

from core.settings import QdrantSettings, Settings
from photosearch.up.apps import app_children


def test_the_embedded_store_runs_the_worker_inside_the_api(tmp_path: Path) -> None:
    children = app_children(Settings(data_dir=tmp_path), tmp_path, "http://127.0.0.1:1")
    assert [c.name for c in children] == ["api", "beat"]
    assert children[0].command[-1] == "serve-embedded"
    assert children[0].log_path == tmp_path / "api.log"


def test_a_qdrant_server_has_a_worker_of_its_own(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, qdrant=QdrantSettings(url="http://qdrant:6333"))
    children = app_children(settings, tmp_path, "http://127.0.0.1:1")
    assert [c.name for c in children] == ["api", "worker", "beat"]
    assert children[0].command[-2:] == ["api", "serve"]
    assert children[1].command[-1] == "worker" and children[1].stop_timeout_s == 90
