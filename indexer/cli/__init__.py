"""`photosearch index ...` (its commands in jobs.py and status.py, on common.py's group),
`photosearch worker` and `photosearch beat` (worker.py)."""

from indexer.cli import jobs, status  # noqa: F401  (their commands join index_app, in this order)
from indexer.cli.common import index_app
from indexer.cli.status import follow
from indexer.cli.worker import beat_command, worker_command

__all__ = ["beat_command", "follow", "index_app", "worker_command"]
