"""`photosearch up`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from model.cli import PrecisionChoice
from photosearch.up.bootstrap import DEFAULT_ARCH


def up_command(
    port: Annotated[
        int | None,
        typer.Option(help="API and page port.", show_default="PHOTOSEARCH_API__PORT, 8000"),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(help="Listen address.", show_default="PHOTOSEARCH_API__HOST, 127.0.0.1"),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Models, index, Redis data, logs.", show_default="PHOTOSEARCH_DATA_DIR"),
    ] = None,
    photos: Annotated[
        Path | None,
        typer.Option(
            help="Index this folder (photos.jsonl/csv beside them for metadata).",
            exists=True,
            file_okay=False,
            resolve_path=True,
        ),
    ] = None,
    pretrained: Annotated[
        str | None,
        typer.Option(
            help="A local open_clip checkpoint (or a pretrained tag) to export.",
            show_default="laion2b_s34b_b79k, random weights where it cannot be downloaded",
        ),
    ] = None,
    arch: Annotated[str, typer.Option(help="open_clip architecture of a new export.")] = (
        DEFAULT_ARCH
    ),
    redis_port: Annotated[
        int | None, typer.Option(help="Port of the Redis it starts.", show_default="6379 if free")
    ] = None,
    precision: Annotated[
        PrecisionChoice | None,
        typer.Option(
            help="Serve this precision: int8 is the CPU's faster variant, fp16 the GPU's. A "
            "change exports a new version and reindexes into it.",
            show_default="the newest version's; at first int8 without a GPU, fp16 with one, "
            "each encoder in fp32 where its variant is below the floor",
        ),
    ] = None,
    fallback: Annotated[
        bool,
        typer.Option(
            help="With --precision: an encoder below the floor serves fp32 (the reason is "
            "printed) instead of stopping `up`.",
        ),
    ] = False,
) -> None:
    """Run everything on this machine: Redis, Triton, the API and page, the indexer, beat.

    The first start exports the model and indexes demo photos (or --photos); later starts
    reuse the data and index only what changed. Ctrl-C stops everything.
    """
    from photosearch.up.configure import UpOptions
    from photosearch.up.supervisor import Supervisor

    options = UpOptions(
        data_dir=data_dir,
        host=host,
        port=port,
        photos=photos,
        pretrained=pretrained,
        arch=arch,
        redis_port=redis_port,
        precision=precision.value if precision else None,
        fallback=fallback,
    )
    raise typer.Exit(Supervisor(options).run())
