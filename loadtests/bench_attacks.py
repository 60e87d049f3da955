"""Measure the API's peak memory, and whether searches still answer, under each attack of the
security review: thumbnails of 100-megapixel PNGs, uploaded PNG bombs, a JSON body of 400,000
unknown keys, originals replaced by a FIFO or by a link to /etc/passwd, and slow-header clients.

    python -m loadtests.bench_attacks [--api-root DIR]

Each attack gets a fresh `photosearch api serve` (beside one real Triton, the ViT-B-32 model of
loadtests.bench_api with random weights, and a small embedded store written here), so one
attack's memory or stuck threads do not carry into the next. Meanwhile one thread searches
continuously, another probes /healthz and /readyz, and a third samples the API's VmRSS every
20 ms. `--api-root` serves the API of another checkout (e.g. a worktree of an older commit).
Prints a Markdown table; no figure is held to a threshold.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import json
import os
import random
import select
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from core.embedding.manifest import load_manifest
from core.settings import Settings
from core.vectorstore import LIVE_ALIAS, PhotoPoint, collection_name, open_store
from harness.models import default_repository, ensure_model
from harness.processes import (
    api_process,
    free_ports,
    own_redis,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
    running,
    triton_ports,
)
from harness.vocabulary import photo_payload
from model.triton_server import TritonServer, new_control_key

BIG = (11547, 8660)  # 100 megapixels
SEARCH = "/v1/search?q=cat"
SLOW_CAP_S = 60.0
_MB = 1024 * 1024


@dataclass
class Answer:
    status: str  # the HTTP status, or the name of the client's error
    seconds: float
    body: bytes = b""


def call(method: str, url: str, timeout: float, **kwargs: Any) -> Answer:
    start = time.monotonic()
    try:
        response = httpx.request(method, url, timeout=timeout, **kwargs)
        return Answer(str(response.status_code), time.monotonic() - start, response.content)
    except httpx.HTTPError as exc:
        return Answer(type(exc).__name__, time.monotonic() - start)


def parallel(n: int, one: Callable[[int], Answer]) -> list[Answer]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def counts(answers: list[Answer]) -> str:
    tally = Counter(a.status for a in answers)
    return ", ".join(f"{status} x{n}" for status, n in sorted(tally.items()))


def summary(answers: list[Answer]) -> str:
    return f"{counts(answers)} in ≤ {max(a.seconds for a in answers):.1f} s"


class Every(threading.Thread):
    """Calls tick() every `interval` seconds (after the last tick ended) until stopped."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval, self.done = interval, threading.Event()

    def tick(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        while True:
            self.tick()
            if self.done.wait(self.interval):
                return

    def stop(self) -> None:
        self.done.set()
        self.join(30)


class Prober(Every):
    """GETs `paths` in turn; keeps every answer."""

    def __init__(self, url: str, paths: list[str], interval: float) -> None:
        super().__init__(interval)
        self.client = httpx.Client(base_url=url, timeout=15)
        self.paths = itertools.cycle(paths)
        self.seen: dict[str, list[Answer]] = {p: [] for p in paths}

    def tick(self) -> None:
        path, start = next(self.paths), time.monotonic()
        try:
            status = str(self.client.get(path).status_code)
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        self.seen[path].append(Answer(status, time.monotonic() - start))


class Sampler(Every):
    """The process's peak VmRSS, sampled every 20 ms, and its VmHWM (reset at the start)."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.02)
        self.pid, self.before, self.peak = pid, rss_bytes(pid), 0
        self.last = self.before
        with contextlib.suppress(OSError):
            reset_peak_rss(pid)

    def tick(self) -> None:
        self.last = rss_bytes(self.pid)
        self.peak = max(self.peak, self.last, peak_rss_bytes(self.pid))


@dataclass
class Outcome:
    answers: str
    notes: str = ""
    cleanup: Callable[[], None] | None = None  # after the measured window


def thumbnails(ids: list[str]) -> Callable[[str, Path], Outcome]:
    def attack(url: str, photos: Path) -> Outcome:
        got = parallel(8, lambda i: call("GET", f"{url}/v1/photos/{ids[i]}/thumbnail", 180))
        return Outcome(summary(got))

    return attack


@functools.cache
def png_bomb() -> bytes:
    """A valid 16-bit greyscale PNG of 6300 x 6290 black pixels: 75 KB that decode to 79 MB
    (a real decompression bomb, not only a lying header). Built before any attack's window."""
    out = io.BytesIO()
    Image.new("I;16", (6300, 6290)).save(out, "PNG", compress_level=9)
    return out.getvalue()


def uploads(url: str, photos: Path) -> Outcome:
    bomb = png_bomb()
    files = {"file": ("bomb.png", bomb, "image/png")}
    got = parallel(4, lambda _: call("POST", f"{url}/v1/search/image", 120, files=files))
    return Outcome(summary(got), f"{len(bomb) // 1024} KB each")


@functools.cache
def json_body() -> bytes:
    """Built before any attack's window: building it holds this process's GIL (and probes)."""
    return json.dumps({"q": "cat", **{f"k{i}": 0 for i in range(400_000)}}).encode()


def json_keys(url: str, photos: Path) -> Outcome:
    body = json_body()
    headers = {"content-type": "application/json"}
    got = call("POST", f"{url}/v1/search", 60, content=body, headers=headers)
    return Outcome(summary([got]), f"{len(body) / _MB:.1f} MB sent, answer {len(got.body):,} bytes")


def fifo(url: str, photos: Path) -> Outcome:
    got = parallel(8, lambda _: call("GET", f"{url}/v1/photos/fifo.jpg/image", 30))
    return Outcome(summary(got), cleanup=lambda: release(photos / "fifo.jpg"))


def release(path: Path) -> None:
    """Open the FIFO for writing until no reader waits on it (each then reads EOF): a reader
    thread stuck in the API can finish, and the API can stop."""
    deadline, idle_since = time.monotonic() + 30, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - idle_since < 2:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            idle_since = time.monotonic()
        except OSError:  # ENXIO: nobody has it open for reading
            pass
        time.sleep(0.05)
    path.unlink(missing_ok=True)


def symlink(url: str, photos: Path) -> Outcome:
    got = call("GET", f"{url}/v1/photos/passwd.jpg/image", 30)
    return Outcome(summary([got]), f"body starts with 'root:': {got.body.startswith(b'root:')}")


def slow_client(url: str) -> float | None:
    """Seconds until the server closed a connection sending headers a byte a second."""
    host, port = url.removeprefix("http://").split(":")
    head = b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Slow: "
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        start = time.monotonic()
        for i in range(int(SLOW_CAP_S)):
            try:
                sock.sendall(head[i : i + 1] or b"a")
                if select.select([sock], [], [], 1.0)[0]:
                    sock.recv(4096)  # b"" (closed) or an error answer before closing
                    return time.monotonic() - start
            except OSError:
                return time.monotonic() - start
    return None


def slow_headers(url: str, photos: Path) -> Outcome:
    with ThreadPoolExecutor(3) as pool:
        held = list(pool.map(lambda _: slow_client(url), range(3)))
    said = [
        f"closed at {s:.0f} s" if s is not None else f"open at {SLOW_CAP_S:.0f} s" for s in held
    ]
    return Outcome(", ".join(said))


ATTACKS: list[tuple[str, Callable[[str, Path], Outcome]]] = [
    ("1. 8 parallel thumbnails of one 100 MP PNG", thumbnails(["big.png"] * 8)),
    ("1b. thumbnails of 8 different 100 MP PNGs", thumbnails([f"big-{i}.png" for i in range(8)])),
    ("2. 4 parallel uploads of a 39.6 MP 16-bit PNG", uploads),
    ("3. POST /v1/search with 400,000 unknown keys", json_keys),
    ("4. 8 parallel originals replaced by a FIFO", fifo),
    ("5. original replaced by a link to /etc/passwd", symlink),
    ("6. 3 clients sending headers a byte a second", slow_headers),
]


def make_photos(folder: Path) -> dict[str, Path]:
    """The originals: photo id -> file (the 1b ids share big.png's file)."""
    folder.mkdir(parents=True)
    w, h = BIG
    x, y = np.linspace(0, 255, w, dtype=np.float32), np.linspace(0, 255, h, dtype=np.float32)
    pixels = np.empty((h, w, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = x[None, :], y[:, None], (x + y[:, None]) / 2
    Image.fromarray(pixels).save(folder / "big.png", "PNG", compress_level=1)
    del pixels
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (200, 120, 40)).save(out, "JPEG")
    (folder / "cat.jpg").write_bytes(out.getvalue())
    os.mkfifo(folder / "fifo.jpg")
    (folder / "passwd.jpg").symlink_to("/etc/passwd")
    files = {p.name: p for p in folder.iterdir()}
    return files | {f"big-{i}.png": folder / "big.png" for i in range(8)}


def write_store(settings: Settings, version: int, dim: int, files: dict[str, Path]) -> None:
    """The live collection, before the API (its one owner) opens the store."""
    store = open_store(settings)
    try:
        name = collection_name(version, "bench")
        store.create_collection(name, dim)
        rng = np.random.default_rng(0)
        points = []
        now = datetime.now(UTC).isoformat()
        for n, (photo_id, path) in enumerate(sorted(files.items())):
            _, payload = photo_payload(random.Random(n), n, version, now)
            payload |= {"photo_id": photo_id, "source_uri": path.as_uri()}
            payload["source_root"] = path.parent.as_uri()
            vector = rng.standard_normal(dim).astype(np.float32)
            points.append(PhotoPoint(photo_id, vector / np.linalg.norm(vector), payload))
        store.upsert(name, points)
        store.set_aliases({LIVE_ALIAS: name})
    finally:
        store.close()


@dataclass
class Row:
    attack: str
    outcome: Outcome
    before: int = 0
    peak: int = 0
    end: int = 0
    searches: list[Answer] = field(default_factory=list)
    health: dict[str, list[Answer]] = field(default_factory=dict)
    died: bool = False

    def markdown(self) -> str:
        ok = sum(a.status == "200" for a in self.searches)
        others = [a for a in self.searches if a.status != "200"]
        searched = f"{ok}/{len(self.searches)}" + (f" ({counts(others)})" if others else "")
        searched += f", max {max((a.seconds for a in self.searches), default=0.0):.1f} s"
        notes = [self.outcome.notes] if self.outcome.notes else []
        if self.end > self.before + 100 * _MB:
            notes.append(f"RSS {self.end / _MB:,.0f} MB at the end")
        for path, seen in self.health.items():
            good = sum(a.status == "200" for a in seen)
            worst = max((a.seconds for a in seen), default=0.0)
            notes.append(f"{path} {good}/{len(seen)} 200, max {worst:.1f} s")
        if self.died:
            notes.append("**the API process died**")
        return (
            f"| {self.attack} | {self.outcome.answers} | {self.before / _MB:,.0f} → "
            f"{self.peak / _MB:,.0f} | {searched} | {'; '.join(notes)} |"
        )


def run_attack(
    env: dict[str, str], work: Path, name: str, attack: Callable[[str, Path], Outcome]
) -> Row:
    env = {**env, "PHOTOSEARCH_API__METRICS_PORT": str(free_ports(1)[0])}
    (port,) = free_ports(1)
    print(f"{name} ...", flush=True)
    url = f"http://127.0.0.1:{port}"
    log = work / f"api-{name[:2].strip('. ')}.log"
    with running(api_process(env, port, log, "warning")) as api:
        pid = api.pid or 0
        for _ in range(60):  # the first search embeds "cat"; the later ones hit the cache
            if call("GET", url + SEARCH, 10).status == "200":
                break
            time.sleep(0.5)
        time.sleep(1)
        sampler = Sampler(pid)
        searches = Prober(url, [SEARCH], 0.05)
        health = Prober(url, ["/healthz", "/readyz"], 0.1)
        for thread in (sampler, searches, health):
            thread.start()
        outcome = attack(url, work / "photos")
        time.sleep(1)
        for thread in (searches, health, sampler):
            thread.stop()
        searches.client.close()
        health.client.close()
        row = Row(name, outcome, sampler.before, sampler.peak, sampler.last)
        row.searches, row.health = searches.seen[SEARCH], health.seen
        row.died = rss_bytes(pid) == 0
        if outcome.cleanup is not None:
            outcome.cleanup()
    print(f"  {row.markdown()}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--api-root", type=Path, help="serve the API of this checkout")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("PHOTOSEARCH_REDIS__URL"),
        help="the API's Redis [PHOTOSEARCH_REDIS__URL, else a Redis of its own, for the run]",
    )
    args = parser.parse_args()
    repo = default_repository()
    version = ensure_model(repo, "ViT-B-32")
    dim = load_manifest(repo, version).embedding_dim
    prefix = f"bench-attacks-{os.getpid()}-{int(time.time())}"
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as tmp, ExitStack() as stack:
        work = Path(tmp).resolve()
        print("writing the photos and the store ...", flush=True)
        files = make_photos(work / "photos")
        json_body()
        png_bomb()
        for name in ("PHOTOSEARCH_QDRANT__URL", "PHOTOSEARCH_QDRANT__PATH"):
            os.environ.pop(name, None)  # the embedded store in the temporary folder
        env = {
            **os.environ,
            "PHOTOSEARCH_DATA_DIR": str(work / "data"),
            "PHOTOSEARCH_MODEL__REPOSITORY": str(repo),
            "PHOTOSEARCH_REDIS__URL": own_redis(stack, work, args.redis_url, prefix),
            "PHOTOSEARCH_REDIS__PREFIX": prefix,
            "PHOTOSEARCH_API__ANONYMOUS_SEARCH": "true",
            # The searches meanwhile come from one address, as fast as they are answered:
            # they show the API answering, which a per-address limit would hide.
            "PHOTOSEARCH_API__ANONYMOUS_RATE_PER_S": "0",
        }
        if args.api_root is not None:
            # api_process runs from this checkout: without the current folder on sys.path
            # (PYTHONSAFEPATH), the packages come from --api-root.
            env |= {"PYTHONPATH": str(args.api_root.resolve()), "PYTHONSAFEPATH": "1"}
        write_store(Settings(data_dir=work / "data"), version, dim, files)
        control = new_control_key()
        with TritonServer(repo, triton_ports(), work / "triton", control_key=control) as triton:
            env["PHOTOSEARCH_TRITON__URL"] = triton.url
            rows = [run_attack(env, work, name, attack) for name, attack in ATTACKS]
    root = args.api_root or "this checkout"
    print(f"\nAPI of {root}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print(
        "| attack | answers | API RSS before → peak (MB) | searches meanwhile (200/total) "
        "| notes |\n|---|---|---|---|---|"
    )
    print("\n".join(row.markdown() for row in rows))


if __name__ == "__main__":
    main()
