"""A running `photosearch up`, as a command finds it: with no PHOTOSEARCH_REDIS__URL given, the
`index` commands take the settings of the `up` that runs on their data directory (what its
up.env holds), under whatever the environment sets itself."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import psutil
from pydantic import ValidationError

from core.settings import settings_from
from core.unreachable import mask_url
from photosearch.up.supervisor import read_state

REDIS_URL = "PHOTOSEARCH_REDIS__URL"


def running_up(data_dir: Path) -> dict[str, Any] | None:
    """The up.json of the `up` running on data_dir; None where none runs (a SIGKILLed one
    leaves its file: its pid is checked)."""
    try:
        state = read_state(data_dir)
    except (OSError, ValueError):
        return None
    pid = state.get("pid")
    if not isinstance(pid, int) or not isinstance(state.get("env"), dict):
        return None
    try:
        alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return None
    return state if alive else None


def adopt_running_up(environ: MutableMapping[str, str]) -> str | None:
    """Put the running `up`'s settings in `environ` under those it sets; the line that says
    which Redis is used: that `up`'s, or the default where none runs. None where the
    environment names a Redis itself."""
    if REDIS_URL in environ:
        return None  # given explicitly: always wins, and is the whole of the choice
    try:
        settings = settings_from(environ)
    except ValidationError:
        return None  # the command itself says what is wrong with the settings
    data_dir = settings.data_dir
    state = running_up(data_dir)
    if state is None or REDIS_URL not in state["env"]:
        # None runs, or it was given a Redis of its own: not in its up.json, nor known here.
        return (
            f"no `photosearch up` runs on {data_dir}: using the default Redis, "
            f"{mask_url(settings.redis.url)} (PHOTOSEARCH_REDIS__URL)"
        )
    for name, value in state["env"].items():
        environ.setdefault(str(name), str(value))
    return (
        f"using the `photosearch up` running on {data_dir} (pid {state['pid']}): Redis at "
        f"{mask_url(environ[REDIS_URL])}"
    )
