"""`photosearch up`: every part of PhotoSearch on one machine, started in order and supervised.

Embedded mode (no Qdrant URL): Redis, the query cache's own Redis, Triton, the API with the
Celery worker on its threads (Qdrant Edge admits one owning process), and beat. With a Qdrant
server the worker is a process of its own, as in production. A child that dies is started
again with a backoff; SIGINT/SIGTERM stop the children in reverse order, and a second one
kills what is left.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from core.atomicfile import write_atomic
from core.settings import Settings, settings_from
from model.triton_server import Ports
from photosearch.up.apps import app_children
from photosearch.up.bootstrap import (
    RANDOM_WEIGHTS_WARNING,
    BootstrapError,
    ModelChoice,
    ensure_model,
)
from photosearch.up.configure import READERS, UpOptions, up_environment
from photosearch.up.indexing import index_then_announce, source_to_index
from photosearch.up.ports import PortBook
from photosearch.up.probes import single_owner
from photosearch.up.processes import Child, ChildError, kill_session, log_tail, redis_binary
from photosearch.up.servers import (
    RedisChild,
    TritonChild,
    broker_redis,
    cache_redis,
    mark_broker,
    triton_child,
)

# What a running `up` tells tools and tests: its pid, URL, children's pids and settings.
STATE_FILE = "up.json"


def read_state(data_dir: Path) -> dict[str, Any]:
    """The running `up`'s up.json in data_dir (OSError: none is running there)."""
    state: dict[str, Any] = json.loads((data_dir / STATE_FILE).read_text())
    return state


class Stopping(BaseException):
    """The first SIGINT/SIGTERM: unwind from wherever the supervisor is, then stop in order."""


class Hurry(BaseException):
    """A second signal while stopping: kill what is left."""


@dataclass
class _Restarts:
    failures: int = 0
    missed: int = 0  # probes in a row that failed
    next_at: float = 0.0
    started_at: float = field(default_factory=time.monotonic)


def _say(line: str) -> None:
    print(f"[up] {line}", flush=True)


class Supervisor:
    def __init__(self, options: UpOptions, say: Callable[[str], None] = _say) -> None:
        self.options = options
        self.say = say
        self.children: list[Child] = []  # started, in order
        self.restarts: dict[str, _Restarts] = {}
        self.stopping = False
        self.env: dict[str, str] = {}
        self._settings: tuple[dict[str, str], Settings] | None = None
        self.ports = PortBook(say)
        self.moved: set[str] = set()  # ports moved whose readers have not started again yet
        self.base_url = ""
        self.data_dir = Path()

    # -- the whole life ------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        code = 0
        if self.options.data_dir is not None:
            self.env["PHOTOSEARCH_DATA_DIR"] = str(self.options.data_dir.resolve())
        try:
            self.data_dir = self.settings().data_dir
            with single_owner(self.data_dir):
                try:
                    self._start(self._configure())
                    self._watch()
                except Stopping:
                    self.say("stopping")
                except (ChildError, BootstrapError) as exc:
                    self.say(f"cannot start: {exc}")
                    code = 1
                finally:
                    self._shutdown()
        except Stopping:
            pass
        except (BootstrapError, ValidationError, OSError) as exc:
            # A bad PHOTOSEARCH_* value, a data directory it cannot write: say which.
            self.say(f"cannot start: {exc}")
            code = 1
        return code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.stopping = True
            raise Stopping(signal.Signals(signum).name)
        raise Hurry

    # -- settings ------------------------------------------------------------------------
    def child_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment each child is started with: this one's, with what `up` decided."""
        return {**os.environ, **self.env, **(extra or {})}

    def settings(self) -> Settings:
        """The settings every child reads from `child_env()` (made again when it changes)."""
        env = self.child_env()
        if self._settings is None or self._settings[0] != env:
            self._settings = (env, settings_from(env))
        return self._settings[1]

    def _configure(self) -> Settings:
        """Decide what runs embedded, hold the ports of what `up` starts, and put the
        addresses in the environment the children inherit: every process reads one tree."""
        self.env, self.base_url = up_environment(self.options, self.settings(), self.ports)
        self._publish_ports()
        return self.settings()

    def _publish_ports(self) -> None:
        """The ports in the environment of the children started from now on, in up.env, and
        in the data directory for its next start."""
        self.env.update(self.ports.environment())
        self.ports.save()
        for child in self.children:
            if isinstance(child, RedisChild):
                child.port = self.ports[child.what]
            elif isinstance(child, TritonChild):
                child.server.ports = self._triton_ports()

    def _triton_ports(self) -> Ports:
        book = self.ports
        return Ports(
            http=book["Triton HTTP"], grpc=book["Triton gRPC"], metrics=book["Triton metrics"]
        )

    # -- starting ------------------------------------------------------------------------
    def _spawn(self, child: Child) -> Child:
        child.log_max_bytes = self.settings().up.log_max_bytes
        self.children.append(child)
        self.restarts[child.name] = _Restarts()
        self.say(f"starting {child.name}")
        self._launch(child)
        self._write_state()
        return child

    def _launch(self, child: Child) -> None:
        """Start a child on its ports, held by `up` until now; those another server took while
        it was down are moved first."""
        ports = self.ports.of(child.name)
        moved = self.ports.reclaim(ports)
        if moved:
            self.moved.update(moved)
            self._publish_ports()
        self.ports.release(ports)  # a small window: PortBook.release says what covers it
        child.env = self.child_env()
        child.start()

    def _run_to_end(self, child: Child) -> int:
        self.children.append(child)
        child.env = self.child_env(child.env)
        try:
            child.spawn()
            assert child.process is not None
            return child.process.wait()
        finally:
            self.children.remove(child)

    def _start(self, settings: Settings) -> None:
        logs = settings.data_dir / "logs"
        model: ModelChoice | None = None
        if "PHOTOSEARCH_TRITON__URL" in self.env:
            model = ensure_model(
                settings.repository,
                logs,
                arch=self.options.arch,
                pretrained=self.options.pretrained,
                say=self.say,
                run=self._run_to_end,
                precision=self.options.precision,
                fallback=self.options.fallback,
            )
            m = model.manifest
            self.say(
                f"model version {m.version}: {m.arch}, weights {m.weights}, {m.served_precision}"
            )
            if m.random_weights:
                self.say(RANDOM_WEIGHTS_WARNING)
        if "Redis" in self.ports:
            folder = settings.data_dir / "redis"
            folder.mkdir(parents=True, exist_ok=True)
            binary = redis_binary(settings.up.redis_server)
            port = self.ports["Redis"]
            self._spawn(broker_redis(binary, port, folder, logs / "redis.log", self.say))
            mark_broker(settings.redis.url, settings.redis.prefix)
        if "Redis cache" in self.ports:
            folder = settings.data_dir / "redis-cache"
            folder.mkdir(parents=True, exist_ok=True)
            binary = redis_binary(settings.up.redis_server)
            port, mb = self.ports["Redis cache"], settings.up.cache_max_mb
            log = logs / "redis-cache.log"
            self._spawn(cache_redis(binary, port, folder, mb, log, self.say))
        if model is not None:
            self._spawn(triton_child(settings, self._triton_ports(), logs, self.say))
        source = source_to_index(settings, self.options.photos, self.say)
        self.env["PHOTOSEARCH_INDEXER__SOURCE"] = source
        # The API writes api.log itself, moved aside by size: a flood of errors is bounded.
        self.env["PHOTOSEARCH_API__LOG_FILE"] = str(logs / "api.log")
        for child in app_children(settings, logs, self.base_url):
            self._spawn(child)
        # On a thread: the main thread keeps watching the children.
        threading.Thread(
            target=index_then_announce,
            args=(settings, model, source, self.base_url, self.say),
            name="index",
            daemon=True,
        ).start()

    # -- supervision ---------------------------------------------------------------------
    def _watch(self) -> None:
        """Restart what exited; kill and restart what stopped answering its probe."""
        up = self.settings().up
        next_probe = time.monotonic() + up.probe_interval_s
        while True:
            now = time.monotonic()
            probe = now >= next_probe
            if probe:
                next_probe = now + up.probe_interval_s
            for child in list(self.children):
                state = self.restarts[child.name]
                code = child.exit_code()
                if code is None:
                    if state.failures and now - state.started_at > up.stable_s:
                        state.failures = 0
                    if probe:
                        self._probe(child, state, up.liveness_failures)
                    continue
                if now >= state.next_at:
                    self._restart(child, code, state)
            time.sleep(0.5)

    def _probe(self, child: Child, state: _Restarts, allowed: int) -> None:
        if child.ready():
            state.missed = 0
            return
        state.missed += 1
        if state.missed >= allowed:
            # Hung, not dead: SIGTERM may never be handled, so no grace.
            self.say(f"{child.name} has not answered {state.missed} probes: killing it")
            state.missed = 0
            child.kill()

    def _restart(self, child: Child, code: int, state: _Restarts) -> None:
        state.failures += 1
        backoff = min(self.settings().up.max_backoff_s, 2.0 ** (state.failures - 1))
        self.say(
            f"{child.name} exited ({code}); starting it again (attempt {state.failures}); "
            f"{child.log_path}:\n{log_tail(child.log_path, 5)}"
        )
        if child.pid is not None:
            kill_session(child.pid)  # what it left behind (Triton's backend stubs)
        try:
            self._launch(child)
        except (ChildError, OSError) as exc:
            self.say(f"{child.name} did not start again: {exc}; next try in {backoff:.0f} s")
            state.next_at = time.monotonic() + backoff
            return
        state.started_at = time.monotonic()
        self.say(f"{child.name} is back")
        self._write_state()
        self._restart_readers(child)

    def _restart_readers(self, server: Child) -> None:
        """Start again, with its new address, what reaches a server that moved to another port:
        stopped and started here, not killed, since an exit would count against its backoff."""
        moved = self.moved & set(self.ports.of(server.name))
        self.moved -= moved
        readers = {name for what in moved for name in READERS.get(what, ())}
        for reader in [c for c in self.children if c.name in readers]:
            self.say(f"starting {reader.name} again: {server.name} moved to another port")
            reader.stop()
            try:
                self._launch(reader)
            except (ChildError, OSError) as exc:  # exited: the watch starts it with a backoff
                self.say(f"{reader.name} did not start again: {exc}")
            self._write_state()

    # -- stopping ------------------------------------------------------------------------
    def _shutdown(self) -> None:
        self.stopping = True
        try:
            for child in reversed(list(self.children)):
                self.say(f"stopping {child.name}")
                child.stop()
        except Hurry:
            self.say("killing what is left")
            for child in self.children:
                child.kill()
        self.ports.close()
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)
        self.say("stopped")

    def _write_state(self) -> None:
        """up.json for tools and tests; up.env for a shell running `photosearch index ...`."""
        state = {
            "pid": os.getpid(),
            "url": self.base_url,
            "children": {c.name: c.pid for c in self.children},
            "env": self.env,
        }
        # Atomic: tools and tests poll up.json while a restarted child rewrites it.
        write_atomic(self.data_dir / STATE_FILE, json.dumps(state, indent=2))
        lines = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        write_atomic(self.data_dir / "up.env", "\n".join(lines) + "\n")
