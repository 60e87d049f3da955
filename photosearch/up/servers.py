"""Redis and Triton as children of `up` whose probes ask who answers: their own process, or
another server on their port (which is then not ready, and said so, never "back")."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.settings import Settings
from model.triton_server import Ports, TritonInstall, TritonServer
from photosearch.up.bootstrap import BootstrapError
from photosearch.up.ports import held_by_another
from photosearch.up.probes import redis_process_id, triton_name
from photosearch.up.processes import (
    Child,
    ChildError,
    cache_command,
    die_with_parent,
    redis_command,
    rotate,
)

Say = Callable[[str], None]


class _Stranger:
    """Says once per start that another server answers on a child's port: a probe repeats."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.said = False

    def seen(self, line: str) -> None:
        if not self.said:
            self.say(line)
            self.said = True


class RedisChild(Child):
    """One of `up`'s Redis servers (the broker's, the query cache's): ready when the Redis on
    its port gives this child's pid (INFO server).

    `what` names its port in `up`'s PortBook ("Redis"); `command(port)` is its command line.
    """

    def __init__(
        self,
        name: str,
        what: str,
        command: Callable[[int], list[str]],
        port: int,
        log_path: Path,
        say: Say,
    ) -> None:
        super().__init__(name, [], log_path)
        self.what = what
        self.make_command = command
        self.port = port  # `up` moves it where another server took it
        self.stranger = _Stranger(say)

    def spawn(self) -> None:
        self.command = self.make_command(self.port)
        self.stranger.said = False
        super().spawn()

    def ready(self) -> bool:
        pid = redis_process_id(self.port)
        if pid is not None and pid != self.pid:
            self.stranger.seen(held_by_another(self.port, self.what, self.name, f"pid {pid}"))
        return pid is not None and pid == self.pid


def broker_redis(binary: str, port: int, folder: Path, log_path: Path, say: Say) -> RedisChild:
    """The Redis of the queue and the job records, kept on disk."""
    return RedisChild(
        "redis", "Redis", lambda p: redis_command(binary, p, folder), port, log_path, say
    )


def cache_redis(
    binary: str, port: int, folder: Path, max_mb: int, log_path: Path, say: Say
) -> RedisChild:
    """The query cache's Redis: in memory, at most `max_mb`, least recently used keys evicted."""
    return RedisChild(
        "redis-cache",
        "Redis cache",
        lambda p: cache_command(binary, p, folder, max_mb),
        port,
        log_path,
        say,
    )


def mark_broker(url: str, prefix: str) -> None:
    """Name `up`'s Redis PhotoSearch's (core/deployment.py) as soon as it answers, before the
    worker's start does: a command run meanwhile finds it PhotoSearch's, not a stranger."""
    from redis import Redis
    from redis.exceptions import RedisError

    from core.deployment import mark

    client = Redis.from_url(url, socket_timeout=10)
    try:
        mark(client, prefix, "up")
    except RedisError as exc:
        raise ChildError(f"redis answered, then refused a write: {exc}") from None
    finally:
        client.close()


class UpTriton(TritonServer):
    """A TritonServer named anew at each start (tritonserver's --id), ready only when the Triton
    on its HTTP port gives that name back (GET /v2)."""

    def __init__(self, *args: Any, say: Say, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_id = ""
        self.stranger = _Stranger(say)

    def command(self, install: TritonInstall, backends: Path) -> list[str]:
        return [*super().command(install, backends), f"--id={self.server_id}"]

    def start(self) -> UpTriton:
        self.server_id = f"photosearch-up-{secrets.token_hex(8)}"
        self.stranger.said = False
        super().start()
        return self

    def is_ready(self) -> bool:
        if not super().is_ready():
            return False
        name = triton_name(self.ports.http)
        if name == self.server_id:
            return True
        if name is not None:
            said = f"it calls itself {name!r}" if name else "it gives no name"
            self.stranger.seen(held_by_another(self.ports.http, "Triton HTTP", "triton", said))
        return False


class TritonChild(Child):
    """Triton through `TritonServer`, which knows the wheel's binary and its backends."""

    def __init__(self, server: UpTriton) -> None:
        super().__init__("triton", [], server.log_path, ready=server.is_ready)
        self.server = server

    def start(self) -> None:
        rotate(self.log_path, self.log_max_bytes)
        self.server.preexec_fn = die_with_parent
        try:
            self.server.start()
        except RuntimeError as exc:
            raise ChildError(str(exc)) from None
        finally:
            self.process = self.server.process

    def stop(self) -> None:
        self.server.stop()

    def kill(self) -> None:
        self.server.stop(timeout_s=0)


def triton_child(settings: Settings, ports: Ports, logs: Path, say: Say) -> TritonChild:
    """Triton serving the settings' model repository on `ports`, logging into `logs`."""
    try:
        server = UpTriton(
            settings.repository,
            ports,
            settings.data_dir / "triton",
            startup_timeout_s=settings.triton.startup_timeout_s,
            log_path=logs / "triton.log",
            control_key=settings.triton.control_key,
            say=say,
        )
    except ValueError as exc:  # a control key Triton's flag cannot carry
        raise BootstrapError(f"PHOTOSEARCH_TRITON__CONTROL_KEY: {exc}") from None
    return TritonChild(server)
