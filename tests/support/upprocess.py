"""`photosearch up` as a subprocess for the tests: its output, its state file, its processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from harness.processes import free_ports
from photosearch.up.supervisor import read_state
from tests.support.waiting import wait_until

UP_TIMEOUT_S = 420


@dataclass
class Up:
    """One `photosearch up` process and everything it printed."""

    data_dir: Path
    port: int
    redis_port: int
    env: dict[str, str]
    args: tuple[str, ...] = ()
    process: subprocess.Popen[str] | None = None
    reader: threading.Thread | None = None
    lines: list[str] = field(default_factory=list)
    # What the fixture that started it saw on the way (e.g. ports during the export).
    seen: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, until: str = "PhotoSearch is up") -> None:
        self.lines = []
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "photosearch", "up"),
                *("--data-dir", str(self.data_dir), "--port", str(self.port)),
                *("--redis-port", str(self.redis_port)),
                *self.args,
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.wait_for(until, UP_TIMEOUT_S)

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def tail(self) -> str:
        return self.output()[-4000:]

    def wait_for(self, text: str, timeout_s: float) -> None:
        process = self.process
        assert process is not None

        def printed() -> bool:
            if any(text in line for line in self.lines):
                return True
            if process.poll() is not None:
                if self.reader is not None:
                    self.reader.join(10)  # the reader's last lines
                if not any(text in line for line in self.lines):
                    raise AssertionError(f"up exited ({process.returncode}):\n{self.output()}")
            return False

        wait_until(printed, timeout_s, lambda: f"{text!r} in:\n{self.output()}")

    def state(self) -> dict[str, Any]:
        return read_state(self.data_dir)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        response = httpx.get(self.url + path, params=params, timeout=30)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 180) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout_s)
        if self.reader is not None:
            self.reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


def ready(up: Up) -> bool:
    try:
        return httpx.get(up.url + "/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def ids(body: dict[str, Any]) -> list[str]:
    return [r["id"] for r in body["results"]]


def newcomer_env() -> dict[str, str]:
    """Only what a newcomer's shell has (no PHOTOSEARCH_*), and Triton and the API's metrics
    on free ports."""
    grpc, http, metrics, api_metrics = free_ports(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    return env | {
        "PHOTOSEARCH_TRITON__GRPC_PORT": str(grpc),
        "PHOTOSEARCH_TRITON__HTTP_PORT": str(http),
        "PHOTOSEARCH_TRITON__METRICS_PORT": str(metrics),
        "PHOTOSEARCH_API__METRICS_PORT": str(api_metrics),
    }


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
