"""The system under load: the one `photosearch up` runs (found by its up.json, or started here),
or any deployment given by its URL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import Settings, get_settings
from photosearch.up.probes import http_ok
from photosearch.up.supervisor import STATE_FILE, read_state
from query_api.auth import hash_key, new_key

UP_TIMEOUT_S = 900  # a first start exports the model (a minute or more on two cores)
APP_NAME = "loadtest-app"  # the internal apps' key name, as the API's metrics count it


class TargetError(RuntimeError):
    """No system to load, with what to do about it."""


@dataclass
class Target:
    url: str
    triton_metrics: str | None = None  # Triton's /metrics, where it is known
    settings: Settings | None = None  # the system's settings, where they are known (up)
    api_key: str | None = None  # the internal apps' key
    admin_key: str | None = None  # --url: a key that may start a sync through the admin API
    photos: Path | None = None  # the photo folder this run owns (--start)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    api_metrics: str | None = None  # the API's /metrics: a listener apart from its URL

    @property
    def metrics_url(self) -> str:
        """The API's /metrics: its own listener (up's API__METRICS_PORT) or what --api-metrics
        gave; a deployment's public URL does not serve it."""
        if self.api_metrics is None:
            raise TargetError("the API's /metrics is not known: pass --api-metrics URL")
        return self.api_metrics

    def stop(self) -> None:
        """Stop the `photosearch up` this run started (SIGTERM: it stops its children)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _from_up_env(env: dict[str, str]) -> tuple[Settings, str | None]:
    """The settings the system's processes read: this environment plus what up set (as
    `set -a; . up.env` gives a shell)."""
    os.environ.update(env)
    get_settings.cache_clear()
    settings = get_settings()
    port = env.get("PHOTOSEARCH_TRITON__METRICS_PORT")
    return settings, f"http://127.0.0.1:{port}/metrics" if port else None


def _api_metrics(settings: Settings) -> str | None:
    """The API's metrics listener on up's machine (its port is in up's environment)."""
    api = settings.api
    return f"http://127.0.0.1:{api.metrics_port}/metrics" if api.metrics_port else None


def attach(data_dir: Path, api_key: str | None) -> Target:
    """The running `photosearch up` of this data directory."""
    state_file = data_dir / STATE_FILE
    try:
        state = read_state(data_dir)
    except (OSError, ValueError) as exc:
        raise TargetError(
            f"no running `photosearch up` in {data_dir} ({exc.__class__.__name__}: {state_file}):"
            " start one (`photosearch up`), pass --data-dir, --start to start one here, or "
            "--url for another deployment"
        ) from None
    url = state["url"]
    if not http_ok(f"{url}/healthz"):
        raise TargetError(f"{url} (from {state_file}) does not answer: is `photosearch up` up?")
    settings, triton = _from_up_env(state.get("env", {}))
    return Target(url, triton, settings, api_key, api_metrics=_api_metrics(settings))


def start(data_dir: Path, photos: Path, port: int, redis_port: int, log: Path) -> Target:
    """Start `photosearch up` on `photos` with a key for the internal apps; wait until it has
    indexed them and says it is up."""
    key = new_key()
    keys = [{"name": APP_NAME, "sha256": hash_key(key), "scopes": ["search"]}]
    # The caller's PHOTOSEARCH_* apply, as they would to `photosearch up`; the keys are ours.
    env = dict(os.environ, PHOTOSEARCH_API__KEYS=json.dumps(keys))
    command = [
        *(sys.executable, "-m", "photosearch", "up"),
        *("--data-dir", str(data_dir), "--photos", str(photos)),
        *("--port", str(port), "--redis-port", str(redis_port)),
    ]
    say(f"starting photosearch up ({data_dir}); its output: {log}")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + UP_TIMEOUT_S
    while "PhotoSearch is up" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=180)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise TargetError(f"photosearch up did not come up:\n{tail}")
        time.sleep(1)
    state = read_state(data_dir)
    settings, triton = _from_up_env(state.get("env", {}))
    metrics = _api_metrics(settings)
    return Target(state["url"], triton, settings, key, None, photos.resolve(), process, metrics)


def say(line: str) -> None:
    """Progress on stderr (stdout is left to the report's path)."""
    print(f"[loadtest] {line}", file=sys.stderr, flush=True)
