"""`photosearch model calibrate`: measure a model version's fusion and near-duplicate
threshold on judged photos and keep them in its manifest (photosearch/calibrate.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.quality.judgements import JudgementError, load_judgements
from core.settings import get_settings
from model.cli import RepositoryOption


def calibrate_command(
    version: Annotated[int, typer.Option("--version", min=1, help="The model version.")],
    photos: Annotated[
        Path,
        typer.Option(
            "--photos",
            help="A folder of the judged photos, with their metadata manifest (photos.jsonl): "
            "the ids the judgements name.",
        ),
    ],
    judgements: Annotated[
        Path, typer.Option("--judgements", help="A judgement set: queries.tsv and qrels.txt.")
    ],
    repository: RepositoryOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the figures; write nothing.")
    ] = False,
) -> None:
    """Fit version N's hybrid fusion (RRF k, keyword weight) and near-duplicate threshold to
    its own embeddings on a judgement set, and write them into its manifest."""
    from core.embedding.manifest import load_manifest
    from photosearch.calibrate import CalibrationError, calibrate, save

    repo = repository or get_settings().repository
    try:
        load_manifest(repo, version)
        judged = load_judgements(judgements)
    except (FileNotFoundError, JudgementError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if not photos.is_dir():
        typer.echo(f"no photo folder at {photos}", err=True)
        raise typer.Exit(2)
    try:
        report = calibrate(repo, version, photos, judged, settings=get_settings())
    except CalibrationError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    c = report.calibration
    typer.echo(f"model version {version} on {c.judgements}")
    typer.echo(f"  nDCG@10  vector {report.vector_ndcg:.4f}  keyword {report.keyword_ndcg:.4f}")
    typer.echo("  fusion (k, keyword weight): nDCG@10, best first")
    for f in report.fusions[:5]:
        typer.echo(f"    {f.rrf_k:>4} {f.keyword_weight:>5}: {f.ndcg:.4f}")
    shares = ", ".join(f"{kind} {share:.0%}" for kind, share in report.copies_grouped.items())
    typer.echo(
        f"  near-duplicate threshold {report.threshold:.3f} (most similar different photos: "
        f"{report.nearest_distinct:.4f}); copies grouped with their photo: {shares}"
    )
    if dry_run:
        typer.echo("dry run: the manifest is unchanged")
        return
    path = save(repo, version, c)
    typer.echo(
        f"written to {path}: fusion k {c.rrf_k}, keyword weight {c.keyword_weight}, threshold "
        f"{c.duplicate_threshold}; the API and workers use it once they load version {version} "
        "again (restart them)"
    )
