"""Issue 8's bad and odd images at POST /v1/search/image: odd ones search, bad ones are 4xx."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from model.triton_server import TritonServer
from tests.support.api import SEARCH_KEY, Indexed, api_settings, indexed_api
from tests.support.images import (
    broken_files,
    encode,
    odd_files,
    png_bomb,
    png_header_only,
)

SEARCH = {"X-API-Key": SEARCH_KEY}
TIMEOUT = httpx.Timeout(30.0)  # a hang fails the test instead of blocking the suite
PHOTO = "photo005.jpg"


@dataclass
class Api:
    url: str
    indexed: Indexed
    max_pixels: int

    def upload(
        self, data: bytes, name: str = "query.jpg", mime: str = "image/jpeg"
    ) -> httpx.Response:
        return httpx.post(
            self.url + "/v1/search/image",
            params={"limit": 5},
            files={"file": (name, data, mime)},
            headers=SEARCH,
            timeout=TIMEOUT,
        )

    def top(self, data: bytes, name: str = "query.jpg") -> list[str]:
        """The ids of the five best results for an upload that must succeed."""
        response = self.upload(data, name)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert len(results) == 5, results
        return [r["id"] for r in results]


@pytest.fixture(scope="module")
def api(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("bad-images")
    settings = api_settings(tmp / "data", triton.url, repository)
    with indexed_api(settings, tmp / "photos", 12) as served:
        yield Api(served.server.url, served.indexed, settings.api.max_upload_pixels)


def upright(api: Api) -> Image.Image:
    """An indexed photo, as the index holds it."""
    return Image.open(api.indexed.files[PHOTO]).convert("RGB")


@pytest.mark.parametrize("name", sorted(odd_files(Image.new("RGB", (8, 8)))))
def test_odd_but_valid_images_search_by_content_and_find_their_photo(api: Api, name: str) -> None:
    photo = upright(api)
    ids = api.top(odd_files(photo)[name], name)
    if name == "sixteen-bit.png":
        # Greyscale, so its neighbours need not start with the colour original; scaled to
        # 8 bits it is exactly the 8-bit grey photo, and ranks as that does.
        assert ids == api.top(encode(photo.convert("L"), "PNG"), "grey.png")
    else:
        assert ids[0] == PHOTO, (name, ids)


def test_an_exif_rotated_photo_ranks_as_its_upright_copy(api: Api) -> None:
    photo = upright(api)
    sideways = odd_files(photo)["exif-rotated.jpg"]
    stored = Image.open(io.BytesIO(sideways))
    assert stored.getexif()[0x0112] == 6
    rotated_back = np.asarray(stored.convert("RGB").transpose(Image.Transpose.ROTATE_270), float)
    assert np.abs(rotated_back - np.asarray(photo, float)).mean() < 6  # stored sideways
    assert np.abs(np.asarray(stored.convert("RGB"), float) - np.asarray(photo, float)).mean() > 20
    plain = api.top(encode(photo, quality=95))
    assert api.top(sideways)[0] == plain[0] == PHOTO
    # Without the orientation applied the same pixels are another picture to the model.
    unrotated = encode(photo.transpose(Image.Transpose.ROTATE_90), quality=95)
    assert api.top(unrotated) != plain


def test_an_animated_gif_is_searched_by_its_first_frame(api: Api) -> None:
    gif = odd_files(upright(api))["animated.gif"]
    first = Image.open(io.BytesIO(gif)).convert("RGB")
    assert api.top(gif) == api.top(encode(first, "PNG"))


@pytest.mark.parametrize(
    ("case", "status", "says"),
    [
        ("zero bytes", 422, "empty file"),
        ("text named .jpg", 422, "not an image"),
        ("truncated jpeg", 422, "truncated"),
        ("corrupt jpeg", 422, "corrupt"),
        ("html", 422, "not an image"),
    ],
)
def test_broken_files_are_422_saying_what_is_wrong(
    api: Api, case: str, status: int, says: str
) -> None:
    response = api.upload(broken_files()[case])
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == "invalid_image", body
    assert says in body["message"], body


@pytest.mark.parametrize(
    ("name", "build", "says"),
    [
        ("a real 30000x30000 PNG", lambda: png_bomb(30000, 30000), "pixels"),
        ("a 10000x10000 PNG bomb", lambda: png_bomb(10_000, 10_000), "100000000 pixels"),
        ("a header of 30000x30000", lambda: png_header_only(30000, 30000), "pixels"),
        ("a header of 100000x100000", lambda: png_header_only(100_000, 100_000), "pixels"),
    ],
)
def test_decompression_bombs_are_413_naming_the_pixels(
    api: Api, name: str, build: Callable[[], bytes], says: str
) -> None:
    data = build()
    assert len(data) < 200_000, len(data)  # small files: the pixels are the problem
    response = api.upload(data, "bomb.png", "image/png")
    assert response.status_code == 413, (name, response.text)
    body = response.json()
    assert body["error"] == "too_large" and says in body["message"], body
    assert str(api.max_pixels) in body["message"], body


@pytest.mark.parametrize("size", [(1, 60_000), (60_000, 1), (3, 30_000)])
def test_a_needle_thin_image_is_answered_not_blown_up_by_the_resize(
    api: Api, size: tuple[int, int]
) -> None:
    # The shorter side is scaled to 224 pixels first: 1x60000 would become 224x13 million.
    data = encode(Image.new("RGB", size, (200, 30, 30)), "PNG")
    response = api.upload(data, "needle.png", "image/png")
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 5
