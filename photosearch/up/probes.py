"""What `photosearch up` checks: who answers on a port, the API's health, one `up` per data dir."""

from __future__ import annotations

import fcntl
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from photosearch.up.bootstrap import BootstrapError
from photosearch.up.processes import free_port, port_free


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def readyz(base: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as response:
            body: dict[str, Any] = json.load(response)
            return body
    except urllib.error.HTTPError as exc:  # 503 "not ready" still says why
        try:
            body = json.load(exc)
        except ValueError:
            return None
        return body
    except (urllib.error.URLError, OSError, ValueError):
        return None


def triton_name(http_port: int) -> str | None:
    """The name the Triton on this port gives itself (GET /v2: tritonserver's --id); None where
    nothing answers there, "" where what answers gives no name."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2", timeout=2) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    name = body.get("name") if isinstance(body, dict) else None
    return name if isinstance(name, str) else ""


def redis_process_id(port: int) -> int | None:
    """The pid the Redis on this port gives (INFO server); None where none answers."""
    from redis import Redis
    from redis.exceptions import RedisError

    client = Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        return int(client.info("server")["process_id"])
    except (RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


@contextmanager
def single_owner(data_dir: Path) -> Iterator[None]:
    """One `up` per data directory: two would fight over the store and the ports."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with (data_dir / "up.lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise BootstrapError(
                f"another `photosearch up` (pid {lock.read().strip() or '?'}) uses {data_dir}"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        yield


def choose_port(preferred: int, what: str, say: Callable[[str], None]) -> int:
    if port_free(preferred):
        return preferred
    port = free_port()
    say(f"port {preferred} ({what}) is taken: using {port}")
    return port
