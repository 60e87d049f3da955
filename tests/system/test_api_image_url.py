"""Search by image URL against the real stack: the API fetches from a local web server, and
refuses what would reach a private network (the server-side request forgery an image URL
invites), each refusal a 4xx that says which rule.

Every URL here names an address or `localhost`, never a name that needs DNS: the tests pass
in a network namespace with only loopback (`unshare -n`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.processes import free_ports
from model.triton_server import TritonServer
from tests.support.api import (
    ADMIN_KEY,
    SEARCH_KEY,
    ApiServer,
    Indexed,
    api_settings,
    index_photos,
    metric,
    own_store,
    serving,
)
from tests.support.imagehost import ImageHost
from tests.support.waiting import wait_until

SEARCH = {"X-API-Key": SEARCH_KEY}
TIMEOUT = httpx.Timeout(30.0)  # a hang fails the test instead of blocking the suite
PHOTO = "photo005.jpg"
MAX_BYTES = 300_000  # the allowing API's image limit: far above a test photo, quick to pass
FETCHES = "photosearch_image_url_fetches_total"


@dataclass
class Stack:
    default: ApiServer  # the settings' defaults: public addresses only
    allowing: ApiServer  # IMAGE_URL_ALLOW=["127.0.0.1"]
    host: ImageHost
    indexed: Indexed
    # Another API over the same store, with these API settings.
    make: Callable[..., AbstractContextManager[ApiServer]]

    def image(self) -> bytes:
        return self.indexed.files[PHOTO].read_bytes()


@pytest.fixture(scope="module")
def stack(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("image-url")
    settings = api_settings(tmp / "data", triton.url, repository)
    with own_store(settings) as store:
        indexed = index_photos(store, settings, tmp / "photos", 12)

        @contextmanager
        def make(**api: Any) -> Iterator[ApiServer]:
            other = api_settings(tmp / "data", triton.url, repository, **api)
            with serving(other, store) as server:
                yield server

        with (
            ImageHost(indexed.files[PHOTO].read_bytes()) as host,
            serving(settings, store) as default,
            make(image_url_allow=["127.0.0.1"], max_upload_bytes=MAX_BYTES) as allowing,
        ):
            yield Stack(default, allowing, host, indexed, make)


def search(server: ApiServer, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/search/image",
        params={"limit": 6},
        headers={**SEARCH, **(headers or {})},
        timeout=TIMEOUT,
        **body,
    )


def by_url(server: ApiServer, url: str) -> httpx.Response:
    return search(server, json={"url": url})


def ranking(response: httpx.Response) -> list[tuple[str, float]]:
    assert response.status_code == 200, response.text
    return [(r["id"], r["score"]) for r in response.json()["results"]]


def refused(response: httpx.Response, status: int, says: str, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert says in body["message"], body
    assert body["error"] == code, body


def test_a_url_search_answers_as_an_upload_of_the_same_bytes(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    fetched = metric(server.metrics_url, FETCHES, outcome="fetched")
    upload = ranking(search(server, files={"file": ("query.jpg", stack.image(), "image/jpeg")}))
    assert upload[0][0] == PHOTO and upload[0][1] == pytest.approx(1.0, abs=1e-4)
    assert len(upload) == 6

    url = f"{host.url}/photo.jpg"
    answers = [
        search(server, files={"url": (None, url)}),  # a multipart field
        search(server, data={"url": url}),  # a urlencoded form
        search(server, json={"url": url}),
        by_url(server, f"{host.url}/untyped"),  # no Content-Type: the decoder decides
    ]
    for answer in answers:
        got = ranking(answer)
        assert [pid for pid, _ in got] == [pid for pid, _ in upload]
        assert [s for _, s in got] == pytest.approx([s for _, s in upload], abs=1e-5)
    assert "fetch;dur=" in answers[0].headers["server-timing"]
    # Fetched with the URL's own Host header, from the address that was checked.
    assert {s.host for s in host.seen[-4:]} == {f"127.0.0.1:{host.port}"}
    assert metric(server.metrics_url, FETCHES, outcome="fetched") == fetched + 4


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:{port}/photo.jpg", "a loopback address 127.0.0.1"),
        ("http://10.0.0.1/photo.jpg", "a private address 10.0.0.1"),
        ("http://192.168.1.1/", "a private address 192.168.1.1"),
        ("http://172.16.0.1:8080/", "a private address 172.16.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address 169.254.169.254"),
        ("http://100.64.0.1/", "a shared (carrier-grade NAT) address 100.64.0.1"),
        ("http://0.0.0.0:{port}/photo.jpg", "an unspecified address 0.0.0.0"),
        ("http://[::1]:{port}/photo.jpg", "a loopback address ::1"),
        ("http://[fd00::1]/", "a unique-local address fd00::1"),
        ("http://[::ffff:127.0.0.1]:{port}/photo.jpg", "(IPv4 127.0.0.1)"),
        ("http://localhost:{port}/photo.jpg", "localhost resolves to a loopback address 127.0.0.1"),
        # inet_aton's spellings of 127.0.0.1: resolved, then judged by the address
        ("http://2130706433:{port}/photo.jpg", "resolves to a loopback address 127.0.0.1"),
        ("http://127.1:{port}/photo.jpg", "resolves to a loopback address 127.0.0.1"),
    ],
)
def test_addresses_that_are_not_public_are_refused_before_any_connection(
    stack: Stack, url: str, says: str
) -> None:
    seen = len(stack.host.seen)
    answer = by_url(stack.default, url.format(port=stack.host.port))
    refused(answer, 422, says, "url_refused")
    assert "only public addresses are fetched" in answer.json()["message"]
    assert len(stack.host.seen) == seen  # nothing reached the server


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///etc/passwd", "only http and https URLs are fetched; not file:"),
        ("ftp://127.0.0.1/photo.jpg", "only http and https URLs are fetched; not ftp:"),
        ("gopher://127.0.0.1:70/_", "not gopher:"),
        ("/photo.jpg", "give an absolute URL"),
        ("http://user:secret@127.0.0.1/photo.jpg", "credentials"),
        ("http:///photo.jpg", "the URL has no host"),
        ("http://bad_host!/x", "is not a host name or an IP address"),
        ("http://127.0.0.1:99999/", "port 99999 is out of range"),
        ("http://[fe80::1%25eth0]/", "zone"),
        ("http://[::1/", "not a valid URL"),
    ],
)
def test_urls_other_than_http_and_https_to_a_host_are_refused(
    stack: Stack, url: str, says: str
) -> None:
    seen = len(stack.host.seen)
    refused(by_url(stack.allowing, url), 422, says, "invalid_url")
    assert len(stack.host.seen) == seen


def test_every_redirect_is_checked_as_the_url_was(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    redirect = f"{host.url}/redirect"
    for to, status, says in [
        ("http://10.0.0.1/photo.jpg", 302, "a private address 10.0.0.1"),
        (f"http://[::1]:{host.port}/photo.jpg", 301, "a loopback address ::1"),
        ("http://169.254.169.254/latest/meta-data/", 307, "a link-local address 169.254.169.254"),
    ]:
        answer = search(server, json={"url": f"{redirect}?to={to}&status={status}"})
        refused(answer, 422, f"url redirects to {to}: {says}", "url_refused")
    answer = by_url(server, f"{redirect}?to=file:///etc/passwd")
    refused(answer, 422, "url redirects to file:///etc/passwd: only http and https", "invalid_url")
    # Within the allowed address, relative redirects are followed to the image.
    assert ranking(by_url(server, f"{redirect}?to=/photo.jpg&status=308"))[0][0] == PHOTO


def test_five_redirects_are_followed_and_a_sixth_or_a_loop_is_refused(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    assert ranking(by_url(server, f"{host.url}/hops/5"))[0][0] == PHOTO
    refused(by_url(server, f"{host.url}/hops/6"), 422, "more than 5 times", "too_many_redirects")
    seen = len(host.seen)
    refused(by_url(server, f"{host.url}/loop"), 422, "more than 5 times", "too_many_redirects")
    assert [s.path for s in host.seen[seen:]] == ["/loop"] * 6  # the URL and 5 redirects


def test_a_body_over_the_limit_is_refused_as_it_streams(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    before = metric(server.metrics_url, FETCHES, outcome="too_large")
    # No Content-Length: counted while it arrives.
    answer = by_url(server, f"{host.url}/stream?bytes={MAX_BYTES + 1}")
    refused(answer, 413, f"larger than the limit of {MAX_BYTES} bytes", "too_large")
    # A declared length over the limit is refused before the body is read.
    answer = by_url(server, f"{host.url}/declared?bytes={10**12}")
    refused(answer, 413, f"larger than the limit of {MAX_BYTES} bytes", "too_large")
    assert metric(server.metrics_url, FETCHES, outcome="too_large") == before + 2
    # Exactly the limit is fetched, and goes on to the decoder, which finds no image in it.
    answer = by_url(server, f"{host.url}/stream?bytes={MAX_BYTES}")
    refused(answer, 422, "not an image", "invalid_image")


def test_what_is_not_an_image_is_refused(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    answer = by_url(server, f"{host.url}/page.html")
    refused(answer, 422, "the server sent text/html, not an image", "invalid_image")
    # Without a Content-Type the bytes go through the upload's decoder, which refuses them.
    refused(by_url(server, f"{host.url}/text-untyped"), 422, "not an image", "invalid_image")


def test_a_server_that_fails_is_a_502_and_a_missing_image_a_422(stack: Stack) -> None:
    server, host = stack.allowing, stack.host
    answer = by_url(server, f"{host.url}/status/404")
    refused(answer, 422, "the server answered 404 Not Found", "upstream_refused")
    answer = by_url(server, f"{host.url}/status/503")
    refused(answer, 502, "the server answered 503 Service Unavailable", "upstream_error")
    [closed] = free_ports(1)  # nothing listens there
    answer = by_url(server, f"http://127.0.0.1:{closed}/photo.jpg")
    refused(answer, 502, f"could not connect to 127.0.0.1:{closed}", "upstream_error")


def test_a_server_slower_than_the_deadline_is_a_504(stack: Stack) -> None:
    with stack.make(image_url_allow=["127.0.0.1"], image_url_timeout_s=0.5) as server:
        answer = by_url(server, f"{stack.host.url}/slow")
        refused(answer, 504, "the image did not arrive within 0.5 s", "upstream_timeout")
        assert metric(server.metrics_url, FETCHES, outcome="timeout") == 1


def test_one_caller_holds_at_most_its_bound_of_fetches_and_others_search_meanwhile(
    stack: Stack,
) -> None:
    """Issue 33, F6: URL searches at a server that never finishes its answer held the
    replica's fetch pool for the deadline, and everyone's URL searches slowed."""
    with (
        ImageHost(stack.image()) as hanging,  # /slow: headers, then nothing until released
        stack.make(
            image_url_allow=["127.0.0.1"], image_url_per_caller=2, image_url_timeout_s=120
        ) as server,
        ThreadPoolExecutor(2) as pool,
    ):
        held = [pool.submit(by_url, server, f"{hanging.url}/slow") for _ in range(2)]
        wait_until(lambda: len(hanging.seen) == 2, 60, "both fetches reach the hanging server")
        # The caller's third is refused at once, before any connection.
        refused(
            by_url(server, f"{hanging.url}/slow"),
            429,
            "being fetched already, the most one caller may have at once",
            "too_many_fetches",
        )
        assert len(hanging.seen) == 2
        # Another key's URL search is answered meanwhile, and so is an upload of the first.
        other = search(
            server, {"X-API-Key": ADMIN_KEY}, json={"url": f"{stack.host.url}/photo.jpg"}
        )
        assert ranking(other)
        assert ranking(search(server, files={"file": ("a.jpg", stack.image(), "image/jpeg")}))
        hanging.release.set()
        for answer in held:  # an empty body once released: not an image
            assert answer.result(timeout=60).status_code == 422
        # Its slots were given back: the first caller fetches again.
        assert ranking(by_url(server, f"{stack.host.url}/photo.jpg"))
        assert metric(server.metrics_url, FETCHES, outcome="caller_busy") == 1


def test_a_host_name_entry_allows_that_name_and_sends_it_as_the_host(stack: Stack) -> None:
    host = stack.host
    with stack.make(image_url_allow=["localhost"]) as server:
        assert ranking(by_url(server, f"http://localhost:{host.port}/photo.jpg"))[0][0] == PHOTO
        assert host.seen[-1].host == f"localhost:{host.port}"
        # The name is allowed, not the addresses it resolves to under another name.
        answer = by_url(server, f"http://127.0.0.1:{host.port}/photo.jpg")
        refused(answer, 422, "a loopback address 127.0.0.1", "url_refused")


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({}, 422, "file: Field required"),
        ({"json": {}}, 422, "file: Field required"),
        ({"data": {}}, 422, "file: Field required"),
        ({"content": b"http://x", "headers": {"Content-Type": "text/plain"}}, 422, "text/plain"),
        (
            {"files": {"file": ("a.jpg", b"x"), "url": (None, "http://127.0.0.1/")}},
            422,
            "give file or url, not both",
        ),
        ({"files": {"file": (None, "http://127.0.0.1/")}}, 422, "file: a file"),
        ({"files": {"url": ("u.txt", b"http://127.0.0.1/")}}, 422, "url: a text field"),
        ({"files": {"link": (None, "http://127.0.0.1/")}}, 422, "link: Extra inputs"),
        ({"json": {"url": 5}}, 422, "url: Input should be a valid string"),
        ({"json": {"url": "http://127.0.0.1/", "limit": 5}}, 422, "limit: Extra inputs"),
        ({"json": ["http://127.0.0.1/"]}, 422, "must be a JSON object"),
        ({"json": {"url": "  "}}, 422, "url: must not be empty"),
        ({"json": {"url": "http://a/" + "x" * 2048}}, 422, "at most 2048 characters"),
        ({"json": {"url": "http://127.0.0.1/a\nb"}}, 422, "control characters"),
        ({"data": {"url": ["http://127.0.0.1/a", "http://127.0.0.1/b"]}}, 422, "url: give it once"),
        ({"json": {"url": "http://" + "x" * 70_000}}, 413, "limited to"),
    ],
)
def test_a_body_that_is_not_one_image_or_one_url_is_a_4xx_that_says_why(
    stack: Stack, body: dict[str, Any], status: int, says: str
) -> None:
    answer = search(stack.default, **body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["message"], answer.json()


def test_the_schema_documents_both_ways_to_give_the_image(stack: Stack) -> None:
    with stack.make(docs=True) as server:
        schema = httpx.get(server.url + "/openapi.json")
    operation = schema.json()["paths"]["/v1/search/image"]["post"]
    content = operation["requestBody"]["content"]
    assert set(content["multipart/form-data"]["schema"]["properties"]) == {"file", "url"}
    for media in ("application/x-www-form-urlencoded", "application/json"):
        assert content[media]["schema"]["required"] == ["url"]
    assert {"413", "422", "502", "504"} <= set(operation["responses"])
