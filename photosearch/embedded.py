"""`up`'s embedded mode: the API's process also runs the indexing worker, over the one store.

Qdrant Edge admits one owner, so without a Qdrant server the process that serves searches
indexes too; the tasks still come through the real Redis queue. This module is where the API
and the indexer meet: neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from core.settings import get_settings
from query_api.cli import HostOption, LogLevel, LogLevelOption, PortOption

if TYPE_CHECKING:
    from indexer.host import EmbeddedWorker
    from query_api.services import Services


class IndexingWorker:
    """The worker thread as the API's liveness sees it."""

    name = "the embedded indexing worker"

    def __init__(self, worker: EmbeddedWorker) -> None:
        self.worker = worker

    def alive(self) -> bool:
        thread = self.worker.thread
        return thread is not None and thread.is_alive()


@contextmanager
def indexing_worker(services: Services) -> Iterator[IndexingWorker]:
    """The indexer's worker on this process's threads, over the API's own store."""
    from indexer.host import embedded_worker

    with embedded_worker(services.settings, services.store) as worker:
        yield IndexingWorker(worker)


def serve_embedded_command(
    host: HostOption = None,
    port: PortOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Serve the API with the indexing worker in the same process (`up` without Qdrant)."""
    from query_api.cli import serve

    serve(
        get_settings(),
        host=host,
        port=port,
        log_level=log_level.value,
        companions=[indexing_worker],
    )
