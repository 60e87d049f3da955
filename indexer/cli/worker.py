"""`photosearch worker` and `photosearch beat`: a Celery worker of the indexer (threads: one
process owns the embedded store) and the beat that sends the nightly jobs."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from core.settings import get_settings
from indexer.cli.common import LogLevel, LogLevelOption


def worker_command(
    queues: Annotated[
        str | None, typer.Option(help="Comma-separated queues.", show_default="all")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Task threads.", show_default="PHOTOSEARCH_INDEXER__CONCURRENCY"),
    ] = None,
    loglevel: LogLevelOption = LogLevel.INFO,
    name: Annotated[str, typer.Option(help="Its name in logs and job records.")] = "photosearch",
) -> None:
    """Run a Celery worker (threads: one process owns the embedded store)."""
    import threading

    from core.taskqueue import all_queues
    from indexer.app import create_app
    from indexer.rounds import nudging

    settings = get_settings()
    app = create_app(settings)
    names = queues or ",".join(all_queues(settings))
    if settings.indexer.metrics_port:
        from indexer.metrics import serve_metrics

        serve_metrics(settings)
    nudging(app, threading.Event())  # a daemon thread: it ends with the process
    app.worker_main(
        [
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency or settings.indexer.concurrency}",
            f"--queues={names}",
            f"--loglevel={loglevel.value}",
            f"--hostname={name}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def beat_command(loglevel: LogLevelOption = LogLevel.INFO) -> None:
    """Run Celery beat: the nightly sync at PHOTOSEARCH_INDEXER__SYNC_CRON."""
    from indexer.app import create_app

    settings = get_settings()
    app = create_app(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = settings.data_dir / "celerybeat-schedule"
    app.start(["beat", f"--loglevel={loglevel.value}", f"--schedule={schedule}"])
