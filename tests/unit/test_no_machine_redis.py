"""The tests need no Redis on the machine: none names the default port on this host.

Every test reaches the session's Redis (tests/conftest.py starts a Valkey of its own on a free
port and exports its URL), a private one on another free port, or an address it chose where
nothing listens. A Redis URL written into a test or a benchmark with the default port would
pass here only where a Redis happens to run, and fail on a fresh machine with only Python.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from core.settings import Settings
from tests.support.deployfiles import ROOT
from tests.support.redisserver import URL_VARIABLE

FOLDERS = ("tests", "loadtests")
DEPLOY_TESTS = ROOT / "tests" / "deploy"
TEXT = {".py", ".toml", ".json", ".yml", ".yaml", ".md", ".txt", ".cfg", ".ini", ".sh", ".conf"}
DEFAULT_PORT = re.compile(r"([\w.\-]*):" + "6379" + r"\b")
# What a Redis URL on the machine looks like: no host (an f-string's, or the default) or this one.
THIS_HOST = {"", "127.0.0.1", "localhost", "0.0.0.0", "::1"}


def text_files(folder: Path) -> list[Path]:
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and path.suffix in TEXT and "__pycache__" not in path.parts
    )


def machine_redis_lines(text: str, deploy_test: bool = False) -> list[str]:
    """The lines that name the default Redis port on this machine. In the deployment tests a
    pod's address (10.1.0.8:6379) is data about a cluster, not a connection, and is kept."""
    return [
        line.strip()
        for line in text.splitlines()
        if any(m[1] in THIS_HOST or not deploy_test for m in DEFAULT_PORT.finditer(line))
    ]


def test_no_test_or_benchmark_names_a_redis_on_the_machine_s_default_port() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {line}"
        for folder in FOLDERS
        for path in text_files(ROOT / folder)
        if path != Path(__file__)
        for line in machine_redis_lines(
            path.read_text(errors="replace"), path.is_relative_to(DEPLOY_TESTS)
        )
    ]
    assert not found, "use the session's Redis (redis_url) or a RedisServer:\n" + "\n".join(found)


def test_the_check_finds_a_url_on_the_machine_and_keeps_a_pod_s_address() -> None:
    port = ":" + "6379"  # written apart, so that this file passes its own check
    code = f'REDIS_URL = "redis://127.0.0.1{port}/13"\nother = f"redis://{{host}}{port}"\n'
    assert len(machine_redis_lines(code)) == 2
    pod = f'pod_target("redis", "10.1.0.8{port}")'
    assert machine_redis_lines(pod, deploy_test=True) == []
    assert machine_redis_lines(pod) == [pod]  # elsewhere it would be a connection
    assert machine_redis_lines(f'Redis.from_url("redis://localhost{port}")', True) != []


def test_settings_built_in_a_test_reach_the_session_s_redis(redis_url: str) -> None:
    """The session's URL is the environment's, so a Settings() of a test never falls back to
    the default (the machine's Redis), nor a query cache to another one."""
    assert os.environ[URL_VARIABLE] == redis_url
    assert ":" + "6379" not in redis_url
    settings = Settings()
    assert settings.redis.url == redis_url
    assert settings.redis.cache == redis_url
