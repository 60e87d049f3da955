"""Fetch the image of a search by URL: only from allowed addresses, within a deadline and a size.

Every hop (the URL, then each redirect, followed here by hand) is checked the same way: http or
https, no credentials, a host whose every address the policy admits. The request then goes to
that checked address itself, so a second DNS answer cannot send it elsewhere (DNS rebinding),
with the original Host header and, for https, the certificate checked against the host name.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import httpx

from core.settings_api import HOST_NAME, ApiSettings
from query_api.http.errors import ApiError
from query_api.images.urlpolicy import Address, AddressPolicy, parse_address

MAX_URL_LENGTH = 2048
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Fetches in flight at once per replica; each holds up to max_upload_bytes in memory.
_CONNECTIONS = 32
# The image as stored: a compressed body would have to be inflated, an unbounded expansion.
_HEADERS = {
    "Accept": "image/*",
    "Accept-Encoding": "identity",
    "User-Agent": "PhotoSearch (image search by URL)",
}
_NO_SUCH_NAME = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)
_SHOWN = 200  # characters of a redirect's location quoted in a message

__all__ = [
    "MAX_REDIRECTS",
    "MAX_URL_LENGTH",
    "FetchError",
    "FetchSlots",
    "ImageFetcher",
    "open_client",
]


class FetchError(ApiError):
    """An image not fetched: a refusal (4xx), or the server failed (502) or was too slow
    (504). `outcome` labels it in photosearch_image_url_fetches_total."""

    def __init__(
        self,
        status: int,
        outcome: str,
        message: str,
        code: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, code=code, headers=headers)
        self.outcome = outcome


def _invalid(where: str, why: str) -> FetchError:
    return FetchError(422, "invalid_url", f"{where}: {why}", "invalid_url")


@dataclass(frozen=True)
class _Target:
    """One hop's URL, checked: http(s), no credentials, a host name or address, a port."""

    url: httpx.URL
    host: str  # ASCII: an IDNA-encoded name or an address literal
    port: int

    @property
    def https(self) -> bool:
        return self.url.scheme == "https"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.url.scheme] else f"{host}:{self.port}"


def _target(url: httpx.URL, where: str) -> _Target:
    if url.scheme not in _DEFAULT_PORTS:
        given = f"not {url.scheme}:" if url.scheme else "give an absolute URL"
        raise _invalid(where, f"only http and https URLs are fetched; {given}")
    if url.userinfo:
        raise _invalid(where, "a URL with credentials (user:password@) is not fetched")
    host = url.raw_host.decode("ascii", "replace")
    if not host:
        raise _invalid(where, "the URL has no host")
    if parse_address(host) is None and not HOST_NAME.fullmatch(host.lower().rstrip(".")):
        raise _invalid(where, f"{host[:_SHOWN]!r} is not a host name or an IP address")
    if "%" in host:  # an IPv6 zone: an interface of this machine
        raise _invalid(where, "an IPv6 address with a zone is not fetched")
    port = url.port or _DEFAULT_PORTS[url.scheme]
    if not 1 <= port <= 65535:
        raise _invalid(where, f"port {port} is out of range")
    return _Target(url, host, port)


def _shown(location: str) -> str:
    """A redirect's location as the server sent it, cut short."""
    return location if len(location) <= _SHOWN else location[:_SHOWN] + "…"


def open_client(timeout_s: float, verify: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """The fetches' HTTP client: one per replica, since its TLS context (the CA bundle, read
    from disk) costs milliseconds to build.

    No connection is kept alive: one verified for a host name must never carry a request
    for another name that resolved to the same address. No proxy from the environment: it
    would resolve the names itself, after the check.
    """
    return httpx.AsyncClient(
        verify=verify,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=_CONNECTIONS, max_keepalive_connections=0),
    )


class FetchSlots:
    """The fetches each caller has in flight on this replica, at most `per_caller`.

    The replica's connections are shared: a caller pointing at a server that trickles its
    image once held them for the deadline's length, and every other caller's URL searches
    waited (issue 33, F6). The count lives on the event loop, so no lock: nothing awaits
    between the check and the count.
    """

    def __init__(self, per_caller: int) -> None:
        self.per_caller = per_caller
        self.in_flight: dict[str, int] = {}

    @contextmanager
    def held(self, caller: str) -> Iterator[None]:
        """One of the caller's slots for the block; FetchError 429 when all are taken."""
        held = self.in_flight.get(caller, 0)
        if held >= self.per_caller:
            raise FetchError(
                429,
                "caller_busy",
                f"url: {held} images of your searches by URL are being fetched already, "
                f"the most one caller may have at once; search again when one has answered",
                "too_many_fetches",
                headers={"Retry-After": "1"},
            )
        self.in_flight[caller] = held + 1
        try:
            yield
        finally:
            left = self.in_flight[caller] - 1
            if left:
                self.in_flight[caller] = left
            else:
                del self.in_flight[caller]


class ImageFetcher:
    """Fetches the image of a search by URL, or raises FetchError saying why not."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        policy: AddressPolicy,
        *,
        max_bytes: int,
        timeout_s: float,
        per_caller: int = 4,
        on_outcome: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self.client = client
        self.policy = policy
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.slots = FetchSlots(per_caller)
        self.on_outcome = on_outcome

    @classmethod
    def from_settings(cls, api: ApiSettings, on_outcome: Callable[[str], None]) -> ImageFetcher:
        return cls(
            open_client(api.image_url_timeout_s),
            AddressPolicy(api.image_url_allow),
            max_bytes=api.max_upload_bytes,
            timeout_s=api.image_url_timeout_s,
            per_caller=api.image_url_per_caller,
            on_outcome=on_outcome,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def fetch(self, url: str, *, caller: str | None = None) -> bytes:
        """The body of the image at `url` (checked: an image/* or unnamed content type, at
        most max_bytes); the caller decodes it as it decodes an upload.

        `caller` (who asks: query_api.images.body.fetch_caller) may have `per_caller` fetches
        in flight; None: no such bound (a tool's own fetch). The deadline covers the whole
        fetch, every redirect and the body's last byte, not each read alone.
        """
        try:
            try:
                with self.slots.held(caller) if caller is not None else nullcontext():
                    async with asyncio.timeout(self.timeout_s):
                        data = await self._fetch(url)
            except (TimeoutError, httpx.TimeoutException):
                raise FetchError(
                    504,
                    "timeout",
                    f"url: the image did not arrive within {self.timeout_s:.3g} s",
                    "upstream_timeout",
                ) from None
            except httpx.HTTPError as exc:  # the connection failed or the answer was not HTTP
                raise FetchError(
                    502, "upstream_error", f"url: fetching failed: {exc}", "upstream_error"
                ) from None
        except FetchError as exc:
            self.on_outcome(exc.outcome)
            raise
        self.on_outcome("fetched")
        return data

    async def _fetch(self, url: str) -> bytes:
        where = "url"
        try:
            target = _target(httpx.URL(url), where)
        except httpx.InvalidURL as exc:
            raise _invalid(where, f"not a valid URL: {exc}") from None
        for _ in range(MAX_REDIRECTS + 1):
            addresses = await self._addresses(target, where)
            response = await self._send(target, addresses, where)
            try:
                location = response.headers.get("location")
                if response.status_code not in _REDIRECTS or location is None:
                    return await self._body(response, where)
            finally:
                await response.aclose()
            try:
                url_next = target.url.join(location)
            except httpx.InvalidURL as exc:
                raise _invalid(where, f"redirects to an invalid URL: {exc}") from None
            where = f"url redirects to {_shown(location)}"
            target = _target(url_next, where)
        raise FetchError(
            422,
            "too_many_redirects",
            f"url: redirects more than {MAX_REDIRECTS} times",
            "too_many_redirects",
        )

    async def _addresses(self, target: _Target, where: str) -> list[Address]:
        """Every address of the host, each admitted by the policy (or the hop is refused)."""
        literal = parse_address(target.host)
        if literal is not None:
            addresses = [literal]
        else:
            # getaddrinfo blocks: the loop runs it on its default executor.
            loop = asyncio.get_running_loop()
            try:
                found = await loop.getaddrinfo(
                    target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
            except socket.gaierror as exc:
                if exc.errno in _NO_SUCH_NAME:
                    raise _invalid(where, f"the host {target.host} does not resolve") from None
                raise FetchError(
                    502,
                    "upstream_error",
                    f"{where}: the host {target.host} could not be resolved: {exc.strerror}",
                    "upstream_error",
                ) from None
            parsed = (parse_address(str(info[4][0])) for info in found)
            addresses = list(dict.fromkeys(a for a in parsed if a is not None))
        for address in addresses:
            refusal = self.policy.refusal(target.host, address)
            if refusal is not None:
                said = f"{refusal}" if literal else f"{target.host} resolves to {refusal}"
                raise FetchError(
                    422,
                    "refused_address",
                    f"{where}: {said}; only public addresses are fetched",
                    "url_refused",
                )
        if not addresses:
            raise _invalid(where, f"the host {target.host} has no address")
        return addresses

    async def _send(self, target: _Target, addresses: list[Address], where: str) -> httpx.Response:
        """GET from the checked addresses themselves, in order, until one connects."""
        headers = {**_HEADERS, "Host": target.host_header}
        # httpcore takes the TLS server name (SNI, and the name the certificate must hold)
        # from this extension rather than from the address the URL now names.
        extensions = {"sni_hostname": target.host} if target.https else {}
        failure: httpx.ConnectError | None = None
        for address in addresses:
            pinned = target.url.copy_with(host=str(address), fragment=None)
            request = self.client.build_request(
                "GET", pinned, headers=headers, extensions=extensions
            )
            try:
                return await self.client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failure = exc
        raise FetchError(
            502,
            "upstream_error",
            f"{where}: could not connect to {target.host_header}: {failure}",
            "upstream_error",
        )

    async def _body(self, response: httpx.Response, where: str) -> bytes:
        status = response.status_code
        if not 200 <= status < 300:
            # The standard phrase, not the server's own text: nothing of it is echoed.
            said = f"{where}: the server answered {status} {httpx.codes.get_reason_phrase(status)}"
            if 400 <= status < 500:  # the URL is wrong, not the server
                raise FetchError(422, "upstream_status", said, "upstream_refused")
            raise FetchError(502, "upstream_status", said, "upstream_error")
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media and not media.startswith("image/"):
            raise FetchError(
                422,
                "not_image",
                f"{where}: the server sent {media[:100]}, not an image",
                "invalid_image",
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise FetchError(
                502,
                "upstream_error",
                f"{where}: the server sent the image {encoding[:50]}-encoded, though asked "
                "for it as stored",
                "upstream_error",
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large(where)
        # Counted as it arrives: an absent or false Content-Length is not believed.
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large(where)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, where: str) -> FetchError:
        return FetchError(
            413,
            "too_large",
            f"{where}: the image is larger than the limit of {self.max_bytes} bytes",
            "too_large",
        )
