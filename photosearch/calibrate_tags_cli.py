"""`photosearch model calibrate-tags`: measure a model version's tag rule against labelled
photos and keep it in its manifest (photosearch/calibrate_tags.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.settings import get_settings
from model.cli import RepositoryOption


def calibrate_tags_command(
    version: Annotated[int, typer.Option("--version", min=1, help="The model version.")],
    photos: Annotated[
        Path,
        typer.Option(
            "--photos",
            help="A folder of labelled photos (with its photos.jsonl, if any): the ids the "
            "labels name.",
        ),
    ],
    labels: Annotated[
        Path,
        typer.Option("--labels", help="The truth: photo_id<TAB>tag,tag,... a line (labels.tsv)."),
    ],
    vocabulary: Annotated[
        Path | None,
        typer.Option(
            "--vocabulary",
            help="The vocabulary to tag with (one tag a line); default: "
            "PHOTOSEARCH_INDEXER__TAG_VOCABULARY, else the shipped stock-photo vocabulary.",
        ),
    ] = None,
    repository: RepositoryOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the figures; write nothing.")
    ] = False,
) -> None:
    """Fit version N's automatic-tag rule (threshold, margin) to its own embeddings on labelled
    photos, compare its tags with chance, and write it into the manifest (disabled when the
    tags are no better than chance)."""
    from core.embedding.manifest import load_manifest
    from core.tagging.vocabulary import VocabularyError, load_vocabulary
    from photosearch.calibrate_tags import TagCalibrationError, calibrate_tags, save_tags

    settings = get_settings()
    repo = repository or settings.repository
    try:
        load_manifest(repo, version)
        vocab = load_vocabulary(vocabulary or settings.indexer.tag_vocabulary)
    except (FileNotFoundError, VocabularyError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if not photos.is_dir():
        typer.echo(f"no photo folder at {photos}", err=True)
        raise typer.Exit(2)
    try:
        report = calibrate_tags(repo, version, photos, labels, vocab, settings=settings)
    except TagCalibrationError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    c = report.calibration
    f = c.figures
    typer.echo(f"model version {version}: {c.vocabulary}")
    typer.echo("  rules (threshold, margin): precision, recall, F1, tags a photo; best first")
    for s in report.best:
        typer.echo(
            f"    {s.rule.threshold:>8.4f} {s.rule.margin:>8.4f}: {s.precision:.3f} "
            f"{s.recall:.3f} {s.f1:.3f} {s.tags_per_photo:.2f}"
        )
    typer.echo(
        f"  chosen: threshold {c.threshold:.4f}, margin {c.margin:.4f}, at most {c.max_tags} "
        f"tags: precision {f['precision']:.3f}, recall {f['recall']:.3f}, F1 {f['f1']:.3f}, "
        f"{f['tags_per_photo']:.2f} tags a photo ({f['truth_per_photo']:.2f} true)"
    )
    typer.echo(
        f"  chance (as many random tags a photo): precision {f['chance']:.3f} (the base "
        f"rate), recall {f['chance_recall']:.3f}, F1 {f['chance_f1']:.3f}"
    )
    typer.echo(f"  tags {'enabled' if c.enabled else 'DISABLED'}: {c.reason}")
    if dry_run:
        typer.echo("dry run: the manifest is unchanged")
        return
    path = save_tags(repo, version, c)
    typer.echo(
        f"written to {path}; the indexer tags with it once it loads version {version} again"
        + ("" if c.enabled else " (it stores no automatic tags for this version)")
    )
