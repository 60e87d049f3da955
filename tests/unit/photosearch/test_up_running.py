"""A command finds the `up` running on its data directory by itself: its settings under those
the environment gives, which always win; a Redis named in the environment is the whole choice;
a dead `up`'s file is not taken for a running one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.settings import RedisSettings
from photosearch.up.running import adopt_running_up, running_up
from photosearch.up.supervisor import STATE_FILE

UP_REDIS = "redis://:s3cret@127.0.0.1:41999/0"


def _up_json(data_dir: Path, pid: int) -> None:
    env = {
        "PHOTOSEARCH_DATA_DIR": str(data_dir),
        "PHOTOSEARCH_REDIS__URL": UP_REDIS,
        "PHOTOSEARCH_TRITON__URL": "127.0.0.1:41998",
    }
    state = {"pid": pid, "url": "http://127.0.0.1:8000", "children": {}, "env": env}
    (data_dir / STATE_FILE).write_text(json.dumps(state))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_running_ups_settings_are_taken_under_the_environments_own(tmp_path: Path) -> None:
    _up_json(tmp_path, os.getpid())  # a live process stands for the `up`
    environ = {"PHOTOSEARCH_DATA_DIR": str(tmp_path), "PHOTOSEARCH_TRITON__URL": "mine:1"}
    line = adopt_running_up(environ)
    assert line == (
        f"using the `photosearch up` running on {tmp_path} (pid {os.getpid()}): Redis at "
        "redis://***@127.0.0.1:41999/0"
    )
    assert environ["PHOTOSEARCH_REDIS__URL"] == UP_REDIS
    assert environ["PHOTOSEARCH_TRITON__URL"] == "mine:1"  # given: it wins


def test_a_redis_named_in_the_environment_is_the_whole_choice(tmp_path: Path) -> None:
    _up_json(tmp_path, os.getpid())
    environ = {"PHOTOSEARCH_DATA_DIR": str(tmp_path), "PHOTOSEARCH_REDIS__URL": "redis://x:1/0"}
    assert adopt_running_up(environ) is None
    assert environ == {
        "PHOTOSEARCH_DATA_DIR": str(tmp_path),
        "PHOTOSEARCH_REDIS__URL": "redis://x:1/0",
    }


def test_a_dead_ups_file_is_not_a_running_up_and_the_default_is_said(tmp_path: Path) -> None:
    _up_json(tmp_path, _dead_pid())
    assert running_up(tmp_path) is None
    environ = {"PHOTOSEARCH_DATA_DIR": str(tmp_path)}
    line = adopt_running_up(environ)
    assert line == (
        f"no `photosearch up` runs on {tmp_path}: using the default Redis, "
        f"{RedisSettings().url} (PHOTOSEARCH_REDIS__URL)"
    )
    assert environ == {"PHOTOSEARCH_DATA_DIR": str(tmp_path)}


def test_a_damaged_state_file_is_no_running_up(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"pid": ')
    assert running_up(tmp_path) is None
    (tmp_path / STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "env": []}))
    assert running_up(tmp_path) is None
