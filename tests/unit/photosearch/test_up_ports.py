"""`up`'s ports: a data directory keeps the ports it was given and takes them again at its next
start, says so when another server holds one, and lets a port the operator names win."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from core.deployment import marker_key, require
from photosearch.up.bootstrap import BootstrapError
from photosearch.up.ports import PORTS_FILE, PortBook, hold, kept_ports
from photosearch.up.servers import mark_broker

URL = {"PHOTOSEARCH_REDIS__URL": "redis://127.0.0.1:{}/0"}


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another server listens on (the machine's own Redis on 6379, say)."""
    sock = hold(0)
    assert sock is not None
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _start(data_dir: Path, said: list[str], preferred: int, **options: object) -> int:
    """One start's choice of the queue's Redis port; its sockets closed as `up` stops."""
    book = PortBook(said.append)
    book.keep_in(data_dir)
    try:
        port = book.take("Redis", preferred, "redis", URL, **options)  # type: ignore[arg-type]
        book.save()
        return port
    finally:
        book.close()


def test_a_moved_port_is_kept_for_the_next_start_of_the_data_directory(
    tmp_path: Path, taken: int
) -> None:
    said: list[str] = []
    first = _start(tmp_path, said, taken)
    assert first != taken
    assert said == [f"port {taken} (Redis) is taken: using {first}"]
    assert json.loads((tmp_path / PORTS_FILE).read_text()) == {"Redis": first}

    said.clear()
    assert _start(tmp_path, said, taken) == first  # the default is still taken: no new port
    assert said == []
    assert kept_ports(tmp_path) == {"Redis": first}


def test_a_kept_port_another_server_took_is_said_and_replaced(tmp_path: Path) -> None:
    said: list[str] = []
    first = _start(tmp_path, said, 0)
    stranger = hold(first)
    assert stranger is not None
    try:
        second = _start(tmp_path, said, 0)
    finally:
        stranger.close()
    assert second != first
    assert said == [
        f"port {first} (Redis), this data directory's since an earlier start, is taken by "
        f"another server: using {second}"
    ]
    assert kept_ports(tmp_path) == {"Redis": second}


def test_a_port_the_operator_names_wins_over_the_kept_one(tmp_path: Path) -> None:
    said: list[str] = []
    _start(tmp_path, said, 0)
    named = hold(0)
    assert named is not None
    number = named.getsockname()[1]
    named.close()
    assert _start(tmp_path, said, number, chosen=True, firm="--redis-port") == number
    assert kept_ports(tmp_path) == {"Redis": number}


def test_a_firm_kept_port_that_is_taken_is_refused_with_its_option(
    tmp_path: Path, taken: int
) -> None:
    (tmp_path / PORTS_FILE).write_text(json.dumps({"Redis": taken}))
    with pytest.raises(BootstrapError, match=f"port {taken} .* pass --port"):
        _start(tmp_path, [], 0, firm="--port")


def test_a_damaged_ports_file_is_a_first_start(tmp_path: Path) -> None:
    (tmp_path / PORTS_FILE).write_text('{"Redis": ')
    assert kept_ports(tmp_path) == {}
    (tmp_path / PORTS_FILE).write_text('{"Redis": "6379", "API": 70000, "Triton gRPC": 8001}')
    assert kept_ports(tmp_path) == {"Triton gRPC": 8001}


def test_ups_redis_is_marked_photosearchs(redis: Redis, redis_url: str) -> None:
    prefix = f"unit-{uuid.uuid4().hex}"
    mark_broker(redis_url, prefix)
    try:
        require(redis, prefix)
        assert json.loads(redis.get(marker_key(prefix)) or b"{}")["by"] == "up"
    finally:
        redis.delete(marker_key(prefix))


def test_hold_refuses_a_port_in_use() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert hold(sock.getsockname()[1]) is None


def test_up_gives_its_children_the_ports_its_data_directory_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.processes import free_ports
    from photosearch.up.configure import UpOptions
    from photosearch.up.supervisor import Supervisor

    for name in (
        "PHOTOSEARCH_REDIS__URL",
        "PHOTOSEARCH_REDIS__CACHE_URL",
        "PHOTOSEARCH_TRITON__URL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name in ("GRPC_PORT", "HTTP_PORT", "METRICS_PORT"):
        monkeypatch.delenv(f"PHOTOSEARCH_TRITON__{name}", raising=False)
    monkeypatch.delenv("PHOTOSEARCH_API__METRICS_PORT", raising=False)
    redis, cache, grpc, http, metrics, api_metrics, api = free_ports(7)
    kept_file = {
        "Redis": redis,
        "Redis cache": cache,
        "Triton gRPC": grpc,
        "Triton HTTP": http,
        "Triton metrics": metrics,
        "API metrics": api_metrics,
    }
    (tmp_path / PORTS_FILE).write_text(json.dumps(kept_file))
    supervisor = Supervisor(UpOptions(data_dir=tmp_path, port=api), say=lambda _: None)
    supervisor.env = {"PHOTOSEARCH_DATA_DIR": str(tmp_path)}
    try:
        supervisor._configure()
    finally:
        supervisor.ports.close()
    env = supervisor.env
    assert env["PHOTOSEARCH_REDIS__URL"] == f"redis://127.0.0.1:{redis}/0"
    assert env["PHOTOSEARCH_REDIS__CACHE_URL"] == f"redis://127.0.0.1:{cache}/0"
    assert env["PHOTOSEARCH_TRITON__URL"] == f"127.0.0.1:{grpc}"
    assert env["PHOTOSEARCH_API__METRICS_PORT"] == str(api_metrics)
    assert kept_ports(tmp_path) == {**kept_file, "API": api}
