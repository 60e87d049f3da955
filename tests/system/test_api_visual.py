"""Through the API, on photos the real indexer decoded: a sync by the admin route and a real
Celery worker on this process's threads (Qdrant Edge admits one process), Triton's image
model, then /v1/search narrowed by colour (a name or a hex), orientation, size and copy space,
each answer exactly the photos the generated pictures should give, with their attributes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw

from core.embedding.attributes import NAMES
from core.settings import Settings
from core.taskqueue import all_queues
from core.vectorstore import VectorStore
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, SEARCH_KEY, embedded_runtime, serving
from tests.support.images import encode
from tests.support.indexing import ApiJobs, wait_job

ADMIN = {"X-API-Key": ADMIN_KEY}
SEARCH = {"X-API-Key": SEARCH_KEY}


def picture(size: tuple[int, int], colour: str, *rectangles: tuple[str, list[int]]) -> Image.Image:
    named = {"red": (220, 30, 30), "blue": (35, 60, 220), "yellow": (240, 220, 30)}
    named |= {"green": (30, 170, 50), "orange": (245, 130, 20), "white": (250, 250, 250)}
    named |= {"purple": (140, 40, 170)}
    image = Image.new("RGB", size, named[colour])
    draw = ImageDraw.Draw(image)
    for fill, box in rectangles:
        draw.rectangle(box, fill=named[fill])
    return image


def write_photos(root: Path) -> None:
    root.mkdir(parents=True)
    # A wide red banner with a white square of 5.6%: landscape, copy space.
    wide = picture((1200, 600), "red", ("white", [100, 100, 299, 299]))
    (root / "red-wide.jpg").write_bytes(encode(wide, "JPEG", quality=92))
    (root / "blue-tall.png").write_bytes(encode(picture((400, 900), "blue"), "PNG"))
    # Half yellow, half green: square, no colour holds 60%.
    halves = picture((800, 800), "yellow", ("green", [400, 0, 799, 799]))
    (root / "halves.jpg").write_bytes(encode(halves, "JPEG", quality=92))
    # Stored 900x300, its EXIF says turn it: upright a 300x900 portrait.
    exif = Image.Exif()
    exif[0x0112] = 6
    turned = encode(picture((900, 300), "orange"), "JPEG", quality=92, exif=exif)
    (root / "turned.jpg").write_bytes(turned)
    # Purple and white stripes, a third purple: landscape, no copy space.
    stripes = picture((1000, 500), "white")
    draw = ImageDraw.Draw(stripes)
    for left in range(0, 1000, 150):
        draw.rectangle([left, 0, left + 49, 499], fill=(140, 40, 170))
    (root / "stripes.png").write_bytes(encode(stripes, "PNG"))


@pytest.fixture
def embedded(
    repository: Path, triton: TritonServer, tmp_path: Path
) -> Iterator[tuple[Settings, VectorStore, Runtime]]:
    with embedded_runtime(repository, triton.url, tmp_path / "data") as parts:
        yield parts


def names(answer: dict[str, Any]) -> set[str]:
    return {result["id"].rsplit("/", 1)[-1].split(".")[0] for result in answer["results"]}


def test_searches_narrow_by_the_colours_and_sizes_the_indexer_saw(
    embedded: tuple[Settings, VectorStore, Runtime], tmp_path: Path
) -> None:
    settings, store, runtime = embedded
    root = tmp_path / "photos"
    write_photos(root)
    with (
        worker_thread(create_app(settings), runtime, queues=all_queues(settings)),
        serving(settings, store) as api,
        httpx.Client(base_url=api.url, headers=ADMIN, timeout=30) as admin,
        httpx.Client(base_url=api.url, headers=SEARCH, timeout=30) as search,
    ):
        accepted = admin.post("/v1/admin/sync", json={"source": str(root)})
        assert accepted.status_code == 202, accepted.text
        job = wait_job(ApiJobs(api.url, ADMIN), accepted.json()["job_id"])
        assert job.state == "done" and job.done == 5, job

        def found(**filters: Any) -> set[str]:
            params: dict[str, Any] = {"q": "a photo", "mode": "vector", "collapse": "false"}
            answer = search.get("/v1/search", params=params | {"limit": 50} | filters)
            assert answer.status_code == 200, answer.text
            return names(answer.json())

        every = {"red-wide", "blue-tall", "halves", "turned", "stripes"}
        assert found() == every
        assert found(color="#ff0000") == {"red-wide"}
        assert found(color="blue") == {"blue-tall"}
        assert found(color="ffa500") == {"turned"}  # orange, by its hex
        assert found(color="yellow", color_min_share=0.4) == {"halves"}
        assert found(color="white", color_min_share=0.5) == {"stripes"}
        assert found(color="white", color_min_share=0.01) == {"red-wide", "stripes"}
        assert found(orientation="portrait") == {"blue-tall", "turned"}
        assert found(orientation="square") == {"halves"}
        assert found(min_width=1000) == {"red-wide", "stripes"}
        assert found(min_height=900) == {"blue-tall", "turned"}
        assert found(copy_space="true") == {"red-wide", "blue-tall", "turned"}
        assert found(copy_space="false", orientation="landscape") == {"stripes"}

        answer = search.get("/v1/search", params={"q": "a photo", "color": "orange"}).json()
        [turned] = answer["results"]
        assert turned["attributes"] == {
            "width": 300,
            "height": 900,
            "aspect_ratio": 0.333,
            "orientation": "portrait",
            "colors": [{"name": "orange", "share": 1.0}],
            "copy_space": True,
        }
        refused = search.get("/v1/search", params={"q": "a photo", "color": "mauve"})
        assert refused.status_code == 422 and ", ".join(NAMES) in refused.text
