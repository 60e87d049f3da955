"""How long `photosearch up` takes to come up, recover and stop, and the memory it holds.

    python -m loadtests.bench_up [--data-dir DIR] [--keep]

A first start on an empty data directory (ViT-B-32 export, demo photos), a second start on
the same data, a child killed (Triton, then the API) until the API is ready again, and a
SIGTERM until every process is gone. Each phase is timed from the lines `up` prints.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.processes import alive, descendants, free_ports, rss_mib
from harness.up import UpProcess, newcomer_env
from photosearch.up.probes import http_ok

MARKS = [
    ("model ready (export on a first start)", "model version"),
    ("Redis ready", "starting triton"),
    ("Triton ready", "demo photos in"),
    ("API + worker ready", "starting beat"),
    ("photos indexed, page ready", "PhotoSearch is up"),
]


def phases(up: UpProcess) -> None:
    for label, text in MARKS:
        at = up.at(text)
        print(f"  {label:<40} " + ("(not printed)" if at is None else f"at {at:6.1f} s"))
    sync = next((line for line in up.lines if " sync " in line), "")
    if sync:
        print(f"  sync: {' '.join(sync.split()[3:15])}")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.5)


def back(up: UpProcess, name: str, killed: int, ready: str) -> bool:
    """The child is running again (another pid) and the API ready."""
    return up.state()["children"].get(name) not in (None, killed) and http_ok(ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-up-")) / "data"
    api, redis = free_ports(2)
    env = newcomer_env()
    args_up = ["--port", str(api), "--redis-port", str(redis)]
    log = Path(tempfile.gettempdir()) / f"bench-up-{os.getpid()}.log"
    up = UpProcess(data, args_up, env, log)
    ready = f"http://127.0.0.1:{api}/readyz"
    try:
        print("first start (empty data directory):")
        up.start()
        phases(up)
        assert up.process is not None
        below = descendants(up.process.pid)
        print(f"  resident memory: {rss_mib(below):.0f} MiB in {len(below)} processes")
        for name in ("triton", "api"):
            pid = up.state()["children"][name]
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_until(partial(back, up, name, pid, ready), 300, f"{name} did not come back")
            print(f"{name} killed: ready again after {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        below = descendants(up.process.pid)
        code = up.stop(signal.SIGTERM)
        wait_until(lambda: not any(alive(p) for p in below), 120, "children outlived up")
        print(
            f"SIGTERM: all {len(below)} processes gone after {time.monotonic() - t0:.1f} s "
            f"(exit {code})"
        )
        print("second start (same data):")
        up.start()
        phases(up)
        print(f"up's output: {log}")
    finally:
        up.stop(signal.SIGTERM)
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
