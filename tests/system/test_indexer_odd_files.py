"""Files of a folder that are not plain photos, through the real sync (a `photosearch worker`
process, Redis, Triton, Qdrant Edge) and the real API: links, a FIFO and a socket are never
opened and each is recorded as skipped with its reason, as is a name the API's photo routes
could not serve; every photo that was indexed is served at each of its routes."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import quote

import httpx
from redis import Redis

from core.jobs import Jobs
from core.submit import queue_sync
from core.vectorstore import LIVE_ALIAS
from indexer.photo.skips import SkipRecords
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, api_settings, own_store, serving
from tests.support.indexing import WorkerProcess, photo_folder, tasks, wait_job, write_photo

SKIPPED = {
    "links/inside.jpg": "a symbolic link (to a file inside the source",
    "links/outside.jpg": "a symbolic link leading out of the source",
    "links/folder": "a symbolic link leading out of the source",
    "odd/pipe.jpg": "a FIFO, not a regular file: never opened",
    "odd/sock.jpg": "a socket, not a regular file: never opened",
    "odd/new\nline.jpg": "the control character U+000A",
    "odd/tab\there.jpg": "the control character U+0009",
}
# Indexed and served: what a URL must escape ("%", "?", "#", a space, non-ASCII).
TRICKY = "odd/50% off? #1 é.jpg"


def test_links_fifos_and_unservable_names_are_skipped_and_every_indexed_photo_is_served(
    tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    settings = api_settings(tmp_path / "data", triton.url, repository)
    jobs = Jobs.from_settings(settings)
    root = tmp_path / "photos"
    indexed = {*photo_folder(root, 4), TRICKY}
    write_photo(root / TRICKY, 5)
    write_photo(tmp_path / "elsewhere" / "outside.jpg", 6)
    (root / "links").mkdir()
    (root / "links/inside.jpg").symlink_to(root / "day2/photo000.jpg")
    (root / "links/outside.jpg").symlink_to(tmp_path / "elsewhere/outside.jpg")
    (root / "links/folder").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(root / "odd/pipe.jpg")  # no writer: opening it would block the reader for ever
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "odd/sock.jpg"))
    write_photo(root / "odd/new\nline.jpg", 7)
    write_photo(root / "odd/tab\there.jpg", 0)
    redis = Redis.from_url(settings.redis.url)
    try:
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            job = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
            assert (job.state, job.done, job.skipped, job.failed) == ("done", 5, 7, 0), job
            again = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
            assert (again.state, again.total, again.unchanged) == ("done", 0, 12), again
        with own_store(settings) as store, serving(settings, store) as server:
            collection = store.resolve(LIVE_ALIAS)
            skips = SkipRecords(redis, settings.redis.prefix).in_range(collection, "", None)
            assert set(skips) == set(SKIPPED)
            for key, reason in SKIPPED.items():
                assert reason in skips[key][1], (key, skips[key])
            stored = {point.photo_id for point in store.points(collection)}
            assert stored == indexed
            with httpx.Client(base_url=server.url, headers={"X-API-Key": ADMIN_KEY}) as client:
                for photo_id in sorted(stored):
                    path = f"/v1/photos/{quote(photo_id, safe='/')}"
                    assert client.get(path).json()["id"] == photo_id
                    for route in ("/image", "/thumbnail", "/similar"):
                        answer = client.get(path + route, timeout=30)
                        assert answer.status_code == 200, (photo_id, route, answer.text)
    finally:
        listener.close()
        redis.close()
