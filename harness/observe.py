"""What a running system shows: its pages, its Prometheus metrics, a queue's length."""

from __future__ import annotations

import math
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis


def fetch_text(url: str) -> str:
    """A page's text; "" where it does not answer."""
    try:
        return httpx.get(url, timeout=5).raise_for_status().text
    except httpx.HTTPError:
        return ""


class Metrics:
    """One reading of a /metrics page (Prometheus' text format, parsed by prometheus_client)."""

    def __init__(self, text: str) -> None:
        self.samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def __call__(self, name: str, **labels: str) -> float:
        """A sample summed over the series whose labels include `labels`. The parser names
        a counter's samples NAME_total even where the page wrote NAME (as Triton does)."""
        names, wanted = (name, f"{name}_total"), labels.items()
        return math.fsum(
            s.value for s in self.samples if s.name in names and wanted <= s.labels.items()
        )


class QueueWatch:
    """The longest a Redis list (a Celery queue) was, polled every millisecond or so."""

    def __init__(self, redis_url: str, queue: str) -> None:
        self.redis = Redis.from_url(redis_url)
        self.queue = queue
        self.longest = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.longest = max(self.longest, int(self.redis.llen(self.queue)))
            self.samples += 1
            time.sleep(0.001)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.redis.close()
