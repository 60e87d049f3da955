"""What an outside caller tried against the running API, each answered with a bound or a
refusal while searches keep answering: big originals and thumbnails, image bombs, wide JSON,
slow clients, the operations surface and the headers of every answer."""

from __future__ import annotations

import io
import json
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
from PIL import Image

from core.payload import PhotoPayload
from core.settings import Settings
from core.vectorstore import PhotoPoint, VectorStore
from model.triton_server import TritonServer
from query_api.http.guards import CONTENT_SECURITY_POLICY
from query_api.services import Services
from tests.support.api import (
    SEARCH_KEY,
    ApiServer,
    Indexed,
    api_settings,
    indexed_store,
    serving,
)
from tests.support.images import encode, png_bomb
from tests.support.waiting import wait_until

T = TypeVar("T")

SEARCH = {"X-API-Key": SEARCH_KEY}
BIG = "big.png"  # 4000x3000 RGB: ~73 MB at its decode's peak (decoded_bytes), within 80
HUGE = "huge.png"  # 9000x9000 1-bit: ~96 MB at its peak, more than the whole budget


@dataclass
class Stack:
    server: ApiServer
    settings: Settings
    store: VectorStore
    indexed: Indexed

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def services(self) -> Services:
        services: Services = self.server.app.state.services
        return services


def _add_photo(store: VectorStore, indexed: Indexed, photo_id: str, path: Path) -> None:
    """A point for a file the test wrote, with a neighbour's vector (it is never searched)."""
    [donor] = store.retrieve(indexed.collection, [indexed.ids[0]], with_vectors=True)
    assert donor.vector is not None
    payload: PhotoPayload = {
        **indexed.payloads[indexed.ids[0]],
        "photo_id": photo_id,
        "source_uri": path.as_uri(),
        "content_version": photo_id,
    }
    store.upsert(indexed.collection, [PhotoPoint(photo_id, donor.vector, payload)])


@pytest.fixture(scope="module")
def stack(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("security")
    settings = api_settings(
        tmp / "data",
        triton.url,
        repository,
        image_memory_mb=80,
        image_threads=2,
        image_queue=4,
        header_timeout_s=1.0,
        body_timeout_s=1.0,
    )
    photos = tmp / "photos"
    with indexed_store(settings, photos, 6) as (store, indexed):
        ramp = np.linspace(0, 255, 4000, dtype=np.uint8)
        big = np.stack([np.tile(ramp, (3000, 1))] * 3, axis=-1)
        (photos / BIG).write_bytes(encode(Image.fromarray(big), "PNG", compress_level=1))
        (photos / HUGE).write_bytes(png_bomb(9000, 9000))
        for name in (BIG, HUGE):
            _add_photo(store, indexed, name, photos / name)
        with serving(settings, store) as server:
            yield Stack(server, settings, store, indexed)


class Searches:
    """Searches sent one after another from a thread while an attack runs."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(headers=SEARCH, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                response = client.get(self.url + "/v1/search", params={"q": f"a cat {n}"})
                self.statuses.append(response.status_code)

    def __enter__(self) -> Searches:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # One answered, and one more sent meanwhile.
        wait_until(lambda: len(self.statuses) >= 2, 60, "two searches answered")
        self.stop.set()
        self.thread.join(60)


def _parallel(count: int, call: Any) -> list[httpx.Response]:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: call(), range(count)))


def test_a_big_png_is_decoded_once_for_many_thumbnail_requests_within_the_budget(
    stack: Stack,
) -> None:
    images = stack.services.images
    started = images.started
    with Searches(stack.url) as searches:
        answers = _parallel(
            8, lambda: httpx.get(f"{stack.url}/v1/photos/{BIG}/thumbnail", headers=SEARCH)
        )
    assert [a.status_code for a in answers] == [200] * 8, answers[0].text
    assert len({a.content for a in answers}) == 1  # one thumbnail, shared
    thumb = Image.open(io.BytesIO(answers[0].content))
    assert thumb.format == "JPEG" and max(thumb.size) == stack.settings.api.thumbnail_size
    assert images.started == started + 1  # eight requests, one read and one decode
    assert 0 < images.budget.peak_held <= images.budget.total
    assert images.budget.free == images.budget.total  # everything given back
    # Searches never waited for the images: they have threads of their own.
    assert searches.statuses and set(searches.statuses) == {200}

    # Made once: the next requests are answered from Redis, with no image job.
    again = httpx.get(f"{stack.url}/v1/photos/{BIG}/thumbnail", headers=SEARCH)
    assert again.content == answers[0].content and images.started == started + 1


def test_an_image_that_needs_more_than_the_whole_budget_is_refused(stack: Stack) -> None:
    with Searches(stack.url) as searches:
        answer = httpx.get(f"{stack.url}/v1/photos/{HUGE}/thumbnail", headers=SEARCH)
    assert answer.status_code == 413
    assert "more than the 80 MB" in answer.json()["message"]
    assert stack.services.images.budget.free == stack.services.images.budget.total
    assert set(searches.statuses) == {200}


def test_originals_are_read_once_for_concurrent_requests(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = stack.services.images
    started = images.started
    # Every request for the original asks for it while the first read is still to run: the
    # image threads are held until all six have asked (a reading of a file is too quick to
    # overlap by chance).
    asked: list[str] = []
    single_flight = images.single_flight

    async def counted(key: str, make: Callable[[], Awaitable[T]]) -> T:
        asked.append(key)
        return await single_flight(key, make)

    monkeypatch.setattr(images, "single_flight", counted)
    gate = threading.Event()
    held = [images.pool.submit(gate.wait, 120) for _ in range(stack.settings.api.image_threads)]
    try:
        with ThreadPoolExecutor(6) as pool:
            sent = [
                pool.submit(httpx.get, f"{stack.url}/v1/photos/{BIG}/image", headers=SEARCH)
                for _ in range(6)
            ]
            wait_until(lambda: len(asked) == 6, 60, lambda: f"six requests asking: {asked}")
            gate.set()
            answers = [future.result() for future in sent]
    finally:
        gate.set()
        for future in held:
            future.result()
    assert [a.status_code for a in answers] == [200] * 6
    folder = stack.indexed.files[stack.indexed.ids[0]].parent
    assert all(a.content == (folder / BIG).read_bytes() for a in answers)
    assert images.started == started + 1  # six requests, one read
    # A key is needed to see photos here: no shared cache may keep them.
    assert answers[0].headers["cache-control"].startswith("private")


def test_a_sixteen_bit_png_bomb_upload_is_refused_from_its_header(stack: Stack) -> None:
    bomb = png_bomb(6300, 6290, bit_depth=16)  # 77 KB, 39.6 megapixels of 16-bit grey
    assert len(bomb) < 100_000
    with Searches(stack.url) as searches:
        answer = httpx.post(
            f"{stack.url}/v1/search/image",
            files={"file": ("bomb.png", bomb, "image/png")},
            headers=SEARCH,
        )
    assert answer.status_code == 413
    assert "the limit is 12000000" in answer.json()["message"]
    assert set(searches.statuses) == {200}

    # Below the pixel limit a 16-bit PNG is searched with, inside the decode budget.
    fine = httpx.post(
        f"{stack.url}/v1/search/image",
        files={"file": ("grey.png", png_bomb(3000, 3000, bit_depth=16), "image/png")},
        headers=SEARCH,
    )
    assert fine.status_code == 200, fine.text
    assert len(fine.json()["results"]) > 0


def test_json_bodies_are_small_and_validation_errors_are_capped(stack: Stack) -> None:
    huge = json.dumps({"q": "cat", **{f"k{i}": i for i in range(400_000)}})
    assert len(huge) > 3_000_000
    with Searches(stack.url) as searches:
        answer = httpx.post(
            f"{stack.url}/v1/search",
            content=huge,
            headers={**SEARCH, "content-type": "application/json"},
        )
    assert answer.status_code == 413
    assert str(stack.settings.api.max_json_bytes) in answer.json()["message"]

    # Under the limit, thousands of unknown keys: a few errors and the count of the rest.
    wide = json.dumps({"q": "cat", **{f"k{i}": 0 for i in range(5000)}})
    assert len(wide) < stack.settings.api.max_json_bytes
    answer = httpx.post(
        f"{stack.url}/v1/search",
        content=wide,
        headers={**SEARCH, "content-type": "application/json"},
    )
    assert answer.status_code == 422
    body = answer.json()
    assert len(body["details"]) == 5 and body["more_errors"] == 4995
    assert "and 4995 more errors" in body["message"]
    assert len(answer.content) < 4000
    assert set(searches.statuses) == {200}


def test_every_answer_carries_the_security_headers_and_the_operations_surface_is_closed(
    stack: Stack,
) -> None:
    for path, headers in (("/", {}), ("/healthz", {}), ("/v1/search?q=cat", SEARCH)):
        answer = httpx.get(stack.url + path, headers=headers)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "script-src" not in CONTENT_SECURITY_POLICY  # default-src 'self': no inline
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
    # Off by default: the schema, Swagger UI and the metrics are not on the public port.
    for path in ("/docs", "/openapi.json", "/redoc", "/metrics"):
        assert httpx.get(stack.url + path).status_code == 404, path
    metrics = httpx.get(stack.server.metrics_url)
    assert metrics.status_code == 200 and "photosearch_requests_by_key_total" in metrics.text


def test_docs_when_on_load_no_third_party_script(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    settings = api_settings(tmp_path / "data", triton.url, repository, docs=True)
    with serving(settings) as server:
        page = httpx.get(server.url + "/docs")
        assert page.status_code == 200
        sources = [
            line.split('src="')[1].split('"')[0]
            for line in page.text.splitlines()
            if 'src="' in line
        ]
        assert sources and all(s.startswith("/") for s in sources), sources
        for src in sources:
            assert httpx.get(server.url + src).status_code == 200, src
        assert httpx.get(server.url + "/openapi.json").json()["info"]["title"] == "PhotoSearch"


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_while_sending(conn: socket.socket, data: bytes, pause_s: float) -> bytes:
    """Send `data` a byte at a time; what the server answered if it closed before the end."""
    conn.settimeout(pause_s)
    received = b""
    for byte in data:
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            return received or b"closed"
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return received or b"closed"
        if not chunk:
            return received or b"closed"
        received += chunk
    return b""


def test_slow_clients_are_cut_off_at_the_header_and_body_deadlines(stack: Stack) -> None:
    port = stack.server.port
    # Headers a byte every 0.2 s would take ~10 s to finish: closed at the 1 s deadline.
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 40 + b"\r\n\r\n"
    with _raw(port) as conn:
        answer = _closed_while_sending(conn, request, 0.2)
    assert answer == b"closed"
    # A body a byte every 0.2 s: 408 once the 1 s body deadline passes, then closed.
    head = (
        b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-API-Key: " + SEARCH_KEY.encode() + b"\r\nContent-Length: 60\r\n\r\n"
    )
    with _raw(port) as conn:
        conn.sendall(head)
        answer = _closed_while_sending(conn, b'{"q": "' + b"a" * 50 + b'"}', 0.2)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 1 s" in answer
    # Meanwhile and after, the server answers everyone else.
    assert httpx.get(stack.url + "/v1/search?q=cat", headers=SEARCH).status_code == 200


def test_connections_past_the_bound_get_503(
    triton: TritonServer, repository: Path, tmp_path: Path
) -> None:
    settings = api_settings(tmp_path / "data", triton.url, repository, max_connections=2)
    with serving(settings) as server:
        connections = server.server.server_state.connections
        held = [_raw(server.port) for _ in range(2)]
        try:
            wait_until(lambda: len(connections) == 2, 60, "the server holding both connections")
            answer = httpx.get(server.url + "/healthz")
            assert answer.status_code == 503
        finally:
            for conn in held:
                conn.close()
        wait_until(lambda: not connections, 60, "the server letting both connections go")
        assert httpx.get(server.url + "/healthz").status_code == 200


def test_a_photo_replaced_by_a_link_out_or_a_fifo_is_not_served(stack: Stack) -> None:
    linked, fifo = stack.indexed.ids[1], stack.indexed.ids[2]
    stack.indexed.files[linked].unlink()
    stack.indexed.files[linked].symlink_to("/etc/passwd")
    for rendition in ("image", "thumbnail"):
        answer = httpx.get(f"{stack.url}/v1/photos/{linked}/{rendition}", headers=SEARCH)
        assert answer.status_code == 404, answer.text
        assert "cannot be read from its source" in answer.json()["message"]
        assert b"root:" not in answer.content

    # A FIFO would block a read forever: refused at once, and nothing else waits for it.
    stack.indexed.files[fifo].unlink()
    os.mkfifo(stack.indexed.files[fifo])
    with Searches(stack.url) as searches:
        answers = _parallel(
            8, lambda: httpx.get(f"{stack.url}/v1/photos/{fifo}/image", headers=SEARCH)
        )
        ready = httpx.get(stack.url + "/readyz")
    assert [a.status_code for a in answers] == [404] * 8
    assert ready.status_code == 200
    assert searches.statuses and set(searches.statuses) == {200}


def test_a_scalar_query_parameter_given_twice_is_refused(stack: Stack) -> None:
    twice = "/v1/search?q=cat&photographer=ana&photographer=ben&limit=1&limit=2"
    answer = httpx.get(stack.url + twice, headers=SEARCH)
    assert answer.status_code == 422
    assert answer.json()["message"].startswith("limit, photographer: give each once")
    lists = "/v1/search?q=cat&tags_any=cat&tags_any=city"
    assert httpx.get(stack.url + lists, headers=SEARCH).status_code == 200
