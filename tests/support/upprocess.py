"""`photosearch up` as a subprocess for the tests: its output, its state file, its processes."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from harness.up import UpProcess

# Only bounds a hang: a first start exports ViT-B-32, converts it to int8 (this machine has no
# GPU) and measures both against fp32, minutes on 2 busy cores, before it indexes anything.
UP_TIMEOUT_S = 900


class Up(UpProcess):
    """One `photosearch up` on the given ports, and what the fixture that started it saw on the
    way (e.g. ports during the export). `args`: more of up's options."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        redis_port: int,
        env: dict[str, str],
        args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(data_dir, args, env)
        self.port, self.redis_port = port, redis_port
        self.seen: dict[str, Any] = {}

    def command(self) -> list[str]:
        ports = ["--port", str(self.port), "--redis-port", str(self.redis_port)]
        return [*super().command(), *ports]

    def start(self, until: str = "PhotoSearch is up", timeout_s: float = UP_TIMEOUT_S) -> None:
        super().start(until, timeout_s)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        response = httpx.get(self.url + path, params=params, timeout=30)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def ready(up: Up) -> bool:
    try:
        return httpx.get(up.url + "/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def ids(body: dict[str, Any]) -> list[str]:
    return [r["id"] for r in body["results"]]


def server_can_bind(port: int) -> bool:
    """Whether a server could listen on the port now (with SO_REUSEADDR, as servers do)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


class StrangerTriton:
    """Another Triton on a port, as another `up` or a developer's own would be: ready, and
    giving a name of its own at GET /v2. It records the paths it was asked for."""

    def __init__(self, port: int, name: str = "another-triton") -> None:
        self.name = name
        self.asked: list[str] = []
        asked = self.asked
        metadata = json.dumps({"name": name, "version": "2.51.0", "extensions": []}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                body = {"/v2/health/ready": b"", "/v2": metadata}.get(self.path)
                self.send_response(404 if body is None else 200)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> StrangerTriton:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
