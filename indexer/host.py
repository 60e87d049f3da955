"""A Celery worker inside a process that already owns the embedded store (one owner, real queue)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.worker import WorkController
from celery.worker import state as worker_state

from core.settings import Settings
from core.taskqueue import all_queues
from core.vectorstore import VectorStore
from indexer.app import create_app
from indexer.runtime import Runtime, install_runtime

log = logging.getLogger(__name__)


class EmbeddedWorker(WorkController):
    """A worker on threads of this process, without Celery's cluster chatter (heartbeats,
    mingle, gossip), that says when its consumer is ready."""

    def __init__(
        self, app: Celery, *, queues: list[str], concurrency: int, hostname: str, loglevel: str
    ) -> None:
        self.ready = threading.Event()
        self.thread: threading.Thread | None = None  # the thread it consumes on
        super().__init__(
            app=app,
            pool="threads",
            concurrency=concurrency,
            queues=queues,
            hostname=hostname,
            loglevel=loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready_callback=None,
        )

    def on_consumer_ready(self, consumer: object) -> None:
        self.ready.set()


@contextmanager
def worker_thread(
    app: Celery,
    runtime: Runtime,
    *,
    queues: list[str],
    concurrency: int = 2,
    loglevel: str = "WARNING",
    shutdown_timeout_s: float = 60.0,
    stop_s: float = 10.0,
    name: str = "photosearch-embedded",
) -> Iterator[EmbeddedWorker]:
    """Consume the real queues on threads of this process, with this process's runtime.

    Qdrant Edge allows one process per store, so in the embedded mode the process that owns
    it (the API, or a test) runs the worker too; Redis still carries every task. On the way
    out the tasks in flight get `shutdown_timeout_s` to finish, and the job nudger `stop_s`
    (PHOTOSEARCH_LIFECYCLE__STOP_S) to end its round: a daemon thread, left to the process's
    end past it.
    """
    app.finalize()
    app.set_current()
    # Pool threads see the default app, not this thread's current one.
    app.set_default()
    previous = install_runtime(runtime)
    worker = EmbeddedWorker(
        app,
        queues=queues,
        concurrency=concurrency,
        hostname=f"{name}-{os.getpid()}@localhost",
        loglevel=loglevel,
    )
    thread = threading.Thread(target=worker.start, name="celery-worker", daemon=True)
    worker.thread = thread
    thread.start()
    if not worker.ready.wait(30):
        raise RuntimeError("the embedded Celery worker did not start within 30 s")
    from indexer.rounds import nudging

    stop_nudging = threading.Event()
    nudger = nudging(app, stop_nudging)
    try:
        yield worker
    finally:
        stop_nudging.set()
        nudger.join(stop_s)
        # Celery's warm shutdown: tasks in flight finish, nothing new is taken.
        worker_state.should_terminate = 0  # type: ignore[assignment]
        thread.join(shutdown_timeout_s)
        worker_state.should_terminate = None
        install_runtime(previous)
        if thread.is_alive():
            raise RuntimeError("the embedded Celery worker did not stop in time")


@contextmanager
def embedded_worker(settings: Settings, store: VectorStore) -> Iterator[EmbeddedWorker]:
    """The worker of `photosearch up`'s API process: all queues, over the store it owns.

    It is the only consumer of its queues (the store admits one owner), so the tasks that a
    killed predecessor held unacknowledged are its own: they go back on their queues now,
    not after the visibility timeout (an hour).
    """
    app = create_app(settings)
    restored = restore_orphaned(app, all_queues(settings))
    if restored:
        log.warning("%d tasks of a worker that died were put back on their queues", restored)
    runtime = Runtime(settings, store=store)
    try:
        with worker_thread(
            app,
            runtime,
            queues=all_queues(settings),
            concurrency=settings.indexer.concurrency,
            loglevel="INFO",
            stop_s=settings.lifecycle.stop_s,
        ) as worker:
            yield worker
    finally:
        runtime.close()
        app.close()


def restore_orphaned(app: Celery, queues: list[str]) -> int:
    """Put the unacknowledged tasks of these queues back at their head; how many there were.

    Only for the sole consumer of the queues: a live worker's tasks would run twice. Tasks of
    other queues on the same Redis (kombu keeps one unacked registry per database) are left.
    """
    restored = 0
    with app.connection_for_write() as connection:
        channel: Any = connection.default_channel
        with channel.conn_or_acquire() as client:
            for tag, raw in client.hgetall(channel.unacked_key).items():
                _message, _exchange, routing_key = json.loads(raw)
                if routing_key in queues:
                    channel.qos.restore_by_tag(tag, client, leftmost=True)
                    restored += 1
    return restored
