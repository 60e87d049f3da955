"""The `photosearch` command: one entry point, one sub-command group per part of the system."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from core.settings_doc import settings_table
from indexer.cli import beat_command, index_app, worker_command
from model.cli import model_app, triton_app
from photosearch.calibrate_cli import calibrate_command
from photosearch.calibrate_tags_cli import calibrate_tags_command
from photosearch.embedded import serve_embedded_command
from photosearch.eval_cli import eval_command
from photosearch.experiment_cli import experiment_app
from photosearch.feedback_cli import analytics_command, feedback_app, judgements_app
from photosearch.up.cli import up_command
from query_api.cli import api_app

app = typer.Typer(no_args_is_help=True, help="PhotoSearch: CLIP search over PhotoStock's photos.")


@app.callback()
def options(
    debug: Annotated[
        bool, typer.Option("--debug", help="Log at debug level: the detail behind an error.")
    ] = False,
) -> None:
    """PhotoSearch: CLIP search over PhotoStock's photos."""
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")


def _find_running_up() -> None:
    """`photosearch index ...` reaches the `up` running on its data directory by itself: no
    up.env to source, and none gone stale (its ports are the data directory's)."""
    import os

    from core.settings import get_settings
    from photosearch.up.running import adopt_running_up

    line = adopt_running_up(os.environ)
    if line is not None:  # None: the environment names the Redis itself
        typer.echo(line, err=True)
        get_settings.cache_clear()  # read again, with the `up`'s settings


model_app.command("calibrate")(calibrate_command)
model_app.command("calibrate-tags")(calibrate_tags_command)
app.add_typer(model_app, name="model")
app.add_typer(triton_app, name="triton")
app.add_typer(index_app, name="index", callback=_find_running_up)
app.add_typer(api_app, name="api")
app.command("up")(up_command)
app.command("worker")(worker_command)
app.command("beat")(beat_command)
app.add_typer(judgements_app, name="judgements")
app.command("analytics")(analytics_command)
app.add_typer(feedback_app, name="feedback")
app.command("eval")(eval_command)
app.add_typer(experiment_app, name="experiment", callback=_find_running_up)
app.command("serve-embedded", hidden=True)(serve_embedded_command)


@app.command("settings")
def settings_command() -> None:
    """Print every PHOTOSEARCH_* setting, its default and meaning: the settings page's table."""
    typer.echo(settings_table())


def main() -> None:
    """Run the CLI; a dependency it cannot reach is one line on stderr and exit 2."""
    from core.unreachable import describe

    try:
        app()
    except Exception as exc:
        line = describe(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(2) from None
