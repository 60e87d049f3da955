"""`up` with a Qdrant server configured: the worker is a process of its own, as in production.

No Qdrant server runs on these machines, so the URL points at a port where nothing listens:
the test checks the process layout and that the API says which dependency is missing.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import httpx
import psutil

from harness.processes import alive, descendants, free_ports
from harness.up import newcomer_env
from tests.support.indexing import photo_folder
from tests.support.upprocess import Up


def cmdline(pid: int) -> list[str]:
    """The arguments after `python -m photosearch`."""
    return list(psutil.Process(pid).cmdline()[3:])


def environ(pid: int) -> list[str]:
    return [f"{k}={v}" for k, v in psutil.Process(pid).environ().items()]


def test_with_a_qdrant_server_the_worker_runs_as_its_own_process(
    tmp_path: Path, repository: Path
) -> None:
    # The tiny model, exported beforehand: the layout does not depend on the model, and up's
    # own exports are test_up's and test_up_model_update's.
    shutil.copytree(repository, tmp_path / "data" / "models")
    photos = tmp_path / "photos"
    photo_folder(photos, 4)
    api, redis, qdrant = free_ports(3)
    env = newcomer_env() | {"PHOTOSEARCH_QDRANT__URL": f"http://127.0.0.1:{qdrant}"}
    up = Up(tmp_path / "data", api, redis, env)
    up.args = ("--photos", str(photos))
    up.start(until="(job ")  # every child started; the sync is queued
    try:
        children = up.state()["children"]
        assert set(children) == {"redis", "redis-cache", "triton", "api", "worker", "beat"}
        assert cmdline(children["api"]) == ["api", "serve"]  # not serve-embedded
        assert cmdline(children["worker"]) == ["worker"]
        # The worker pre-warms the query cache before a switch: in the cache's own Redis.
        cache = up.state()["env"]["PHOTOSEARCH_REDIS__CACHE_URL"]
        assert f"PHOTOSEARCH_REDIS__CACHE_URL={cache}" in environ(children["worker"])
        assert not (up.data_dir / "vectors").exists()  # nothing embedded was opened
        ready = httpx.get(up.url + "/readyz", timeout=10)
        assert ready.status_code == 503
        assert ready.json()["checks"]["vector_store"]["ok"] is False
        below = descendants(up.process.pid if up.process else 0)
    finally:
        assert up.stop(signal.SIGTERM) == 0
    assert [pid for pid in below if alive(pid)] == []
