"""The `photosearch` command: one entry point, one sub-command group per part of the system."""

from __future__ import annotations

import typer

from model.cli import model_app, triton_app

app = typer.Typer(no_args_is_help=True, help="PhotoSearch: CLIP search over PhotoStock's photos.")
app.add_typer(model_app, name="model")
app.add_typer(triton_app, name="triton")


def main() -> None:
    app()
