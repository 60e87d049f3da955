"""A local web server of images, redirects and misbehaving answers, for searches by URL.

Plain HTTP/1.0 on 127.0.0.1 (a body without Content-Length ends when the connection closes),
or HTTPS with a given certificate; it records each request's path, Host header and TLS server
name, so a test can tell what reached it and how.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Seen:
    path: str
    host: str | None


class ImageHost:
    """Routes:

    /photo.jpg                     the image, image/jpeg
    /untyped                       the image with no Content-Type
    /page.html                     an HTML page, text/html
    /text-untyped                  text with no Content-Type
    /redirect?to=URL[&status=302]  a redirect to URL
    /hops/N                        N redirects (relative), then the image
    /loop                          redirects to itself, for ever
    /stream?bytes=N                N bytes of image/jpeg streamed without Content-Length
    /declared?bytes=N              a Content-Length of N, then a few bytes
    /status/N                      an answer of status N
    /slow                          headers, then nothing until `release` is set
    """

    def __init__(self, image: bytes, tls: ssl.SSLContext | None = None) -> None:
        self.image = image
        self.seen: list[Seen] = []
        self.server_names: list[str | None] = []
        self.release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        if tls is not None:
            tls.sni_callback = self._sni
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _sni(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self.server_names.append(name)

    def __enter__(self) -> ImageHost:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _handler(host: ImageHost) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet in test output
            pass

        def do_GET(self) -> None:
            host.seen.append(Seen(self.path, self.headers.get("Host")))
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            path = parts.path
            try:
                if path == "/photo.jpg":
                    self._send(200, host.image, "image/jpeg")
                elif path == "/untyped":
                    self._send(200, host.image, None)
                elif path == "/page.html":
                    self._send(
                        200, b"<!doctype html><p>not a photo</p>", "text/html; charset=utf-8"
                    )
                elif path == "/text-untyped":
                    self._send(200, b"just some words, not an image", None)
                elif path == "/redirect":
                    self._redirect(int(query.get("status", "302")), query["to"])
                elif path.startswith("/hops/"):
                    left = int(path.removeprefix("/hops/"))
                    self._redirect(302, f"/hops/{left - 1}" if left > 1 else "/photo.jpg")
                elif path == "/loop":
                    self._redirect(302, "/loop")
                elif path == "/stream":
                    self._stream(int(query["bytes"]))
                elif path == "/declared":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", query["bytes"])
                    self.end_headers()
                    self.wfile.write(host.image[:1000])
                elif path.startswith("/status/"):
                    self._send(int(path.removeprefix("/status/")), b"no", "text/plain")
                elif path == "/slow":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.end_headers()
                    self.wfile.flush()
                    host.release.wait(60)
                else:
                    self._send(404, b"not here", "text/plain")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the API stopped reading: what a refused fetch does

        def _send(self, status: int, body: bytes, content_type: str | None) -> None:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _redirect(self, status: int, location: str) -> None:
            self.send_response(status)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _stream(self, size: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.end_headers()  # no Content-Length: the body ends when the connection does
            sent = 0
            while sent < size:
                block = min(CHUNK, size - sent)
                self.wfile.write(b"\xff" * block)
                sent += block

    return Handler
