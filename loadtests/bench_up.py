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
from pathlib import Path

from tests.support.ports import free_ports
from tests.support.upprocess import Up, alive, descendants, newcomer_env, ready, wait_until


class TimedUp(Up):
    """An Up that notes when each line arrived."""

    def start(self, until: str = "PhotoSearch is up") -> None:
        self.started = time.monotonic()
        self.times: list[tuple[float, str]] = []
        super().start(until)

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.times.append((time.monotonic() - self.started, line.rstrip("\n")))
            self.lines.append(line.rstrip("\n"))

    def at(self, text: str) -> float:
        return next(t for t, line in self.times if text in line)


def rss_mib(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def phases(up: TimedUp) -> None:
    marks = [
        ("model ready (export on a first start)", "model version"),
        ("Redis ready", "starting triton"),
        ("Triton ready", "demo photos in"),
        ("API + worker ready", "starting beat"),
        ("photos indexed, page ready", "PhotoSearch is up"),
    ]
    for label, text in marks:
        try:
            print(f"  {label:<40} at {up.at(text):6.1f} s")
        except StopIteration:
            print(f"  {label:<40} (not printed)")
    sync = next((line for line in up.lines if " sync " in line), "")
    if sync:
        print(f"  sync: {' '.join(sync.split()[3:15])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-up-")) / "data"
    api, redis = free_ports(2)
    up = TimedUp(data, api, redis, newcomer_env())
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
            wait_until(
                lambda n=name, p=pid: up.state()["children"].get(n) not in (None, p) and ready(up),
                300,
                f"{name} did not come back",
            )
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
        up.stop(signal.SIGTERM)
    finally:
        if up.process is not None and up.process.poll() is None:
            up.stop(signal.SIGTERM)
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
