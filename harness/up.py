"""`photosearch up` as a process of its own: every line it prints kept (with its time) and
waited for as an event, its state file, and a stop that leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.processes import free_ports
from photosearch.up.supervisor import read_state


class UpFailed(RuntimeError):
    """`photosearch up` exited, or did not print what was awaited in time."""


class UpProcess:
    """One `photosearch up` and what it printed; `log`, where given, gets a copy."""

    def __init__(
        self, data_dir: Path, args: Sequence[str], env: dict[str, str], log: Path | None = None
    ) -> None:
        self.data_dir, self.args, self.env, self.log = data_dir, args, env, log
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.times: list[float] = []  # each line's seconds since start()
        self._printed = threading.Condition()
        self._reader: threading.Thread | None = None
        self._ended = False

    def command(self) -> list[str]:
        return [sys.executable, "-m", "photosearch", "up", "--data-dir", str(self.data_dir)]

    def start(self, until: str = "PhotoSearch is up", timeout_s: float = 900) -> None:
        """Start it and wait until it prints `until` (UpFailed, stopped, if it does not)."""
        self.lines, self.times, self._ended = [], [], False
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [*self.command(), *self.args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, args=(time.monotonic(),), daemon=True)
        self._reader.start()
        try:
            self.wait_for(until, timeout_s)
        except UpFailed:
            self.stop()
            raise

    def _read(self, started: float) -> None:
        assert self.process is not None and self.process.stdout is not None
        out = self.log.open("a") if self.log is not None else None
        try:
            for line in self.process.stdout:
                with self._printed:
                    self.lines.append(line.rstrip("\n"))
                    self.times.append(time.monotonic() - started)
                    self._printed.notify_all()
                if out is not None:
                    out.write(line)
                    out.flush()
        finally:
            if out is not None:
                out.close()
            with self._printed:
                self._ended = True  # its output closed: it has exited
                self._printed.notify_all()

    def wait_for(self, text: str, timeout_s: float) -> None:
        """Until a line holds `text`; UpFailed with its last lines if it exits first, or past
        `timeout_s` (a ceiling that only bounds a hang)."""
        deadline = time.monotonic() + timeout_s
        with self._printed:
            while self.at(text) is None:
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    why = "exited" if self._ended else f"not within {timeout_s:g} s"
                    raise UpFailed(f"photosearch up {why} before {text!r}:\n{self.tail()}")
                self._printed.wait(left)

    def at(self, text: str) -> float | None:
        """When the first line holding `text` came (seconds since start())."""
        # Read as the reader appends: the line can be one ahead of its time.
        timed = zip(self.times, self.lines, strict=False)
        return next((t for t, line in timed if text in line), None)

    def output(self) -> str:
        return "\n".join(self.lines)

    def tail(self) -> str:
        return self.output()[-4000:]

    def state(self) -> dict[str, Any]:
        return read_state(self.data_dir)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 180) -> int:
        """Stop it (SIGTERM: it stops its children), SIGKILL to its session past timeout_s;
        its exit code. Its output is read to the end and closed."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        if self._reader is not None:
            self._reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


def newcomer_env() -> dict[str, str]:
    """Only what a newcomer's shell has (no PHOTOSEARCH_*), and Triton and the API's metrics
    on free ports."""
    grpc, http, metrics, api_metrics = free_ports(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOTOSEARCH_")}
    return env | {
        "PHOTOSEARCH_TRITON__GRPC_PORT": str(grpc),
        "PHOTOSEARCH_TRITON__HTTP_PORT": str(http),
        "PHOTOSEARCH_TRITON__METRICS_PORT": str(metrics),
        "PHOTOSEARCH_API__METRICS_PORT": str(api_metrics),
    }
