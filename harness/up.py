"""`photosearch up` as a process of its own, every line it prints kept with its time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from photosearch.up.supervisor import read_state


class UpFailed(RuntimeError):
    """`photosearch up` exited, or did not print what was awaited in time."""


@dataclass
class UpProcess:
    """`photosearch up` in a session of its own, each line it prints kept with its time (seconds
    since start()) and copied to `log`."""

    data_dir: Path
    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[str] | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)

    def start(self, until: str = "PhotoSearch is up", timeout_s: float = 900) -> None:
        """Start it and wait until it prints `until` (UpFailed with its last lines if not)."""
        self.lines, started = [], time.monotonic()
        command = [sys.executable, "-m", "photosearch", "up", "--data-dir", str(self.data_dir)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("a")
        self.process = subprocess.Popen(
            [*command, *self.args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, args=(out, started), daemon=True).start()
        deadline = started + timeout_s
        while self.at(until) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(line for _, line in self.lines[-20:])
                raise UpFailed(f"photosearch up did not come up:\n{tail}")
            time.sleep(0.2)

    def _read(self, out: TextIO, started: float) -> None:
        assert self.process is not None and self.process.stdout is not None
        with out:
            for line in self.process.stdout:
                self.lines.append((time.monotonic() - started, line.rstrip("\n")))
                out.write(line)
                out.flush()

    def at(self, text: str) -> float | None:
        """When the first line holding `text` came."""
        return next((t for t, line in self.lines if text in line), None)

    def state(self) -> dict[str, Any]:
        return read_state(self.data_dir)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 180) -> int | None:
        """Stop it (SIGTERM: it stops its children), SIGKILL to its session past timeout_s."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()
