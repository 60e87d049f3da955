"""`photosearch model synthetic` and `photosearch model train-tiny`: the synthetic set and the
tiny model trained on it, a model that really is better than its random-weight twin."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from model.synthetic import DEFAULT_COUNT, DEFAULT_SEED


def synthetic_command(
    out: Annotated[
        Path, typer.Option(help="Folder to write: OUT/photos to index, OUT/judgements to judge.")
    ],
    count: Annotated[int, typer.Option(min=1, max=100_000, help="Photos.")] = DEFAULT_COUNT,
    seed: Annotated[int, typer.Option(min=0, help="Same seed, same photos.")] = DEFAULT_SEED,
) -> None:
    """Write seeded synthetic photos (shapes, colours, sizes, positions, counts, textures), their
    photos.jsonl, a judgement set graded on what each photo shows, and the automatic tags'
    truth: labels.tsv (each photo's shape, colour and texture) and vocabulary.txt."""
    from model.synthetic import generate
    from model.synthetic_judgements import write_set
    from model.synthetic_labels import write_labels

    written = write_set(out, count, seed)
    labels, vocabulary = write_labels(generate(count, seed), out)
    typer.echo(
        f"{written.count} photos in {written.photos} (index this folder); "
        f"{written.queries} queries and their grades in {written.judgements}; "
        f"tags' truth in {labels} over {vocabulary} (photosearch model calibrate-tags)"
    )


def train_tiny_command(
    out: Annotated[
        Path | None,
        typer.Option(help="Also copy the checkpoint here (for `model export --pretrained`)."),
    ] = None,
) -> None:
    """Train the tiny model on synthetic photos (once: later calls find it in the cache) and
    print its checkpoint and how it finds held-back photos against chance and its twin."""
    from model.train import CONFIG, RECIPE, trained_checkpoint

    def progress(step: int, loss: float, _: object) -> None:
        typer.echo(f"training: step {step}/{RECIPE.steps}, loss {loss:.3f}", err=True)

    trained = trained_checkpoint(progress=progress)
    path = trained.checkpoint
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
        path = out
    how = "from the cache" if trained.cached else f"trained in {trained.seconds:.0f} s"
    typer.echo(f"checkpoint {path} ({how}); architecture {CONFIG}")
    typer.echo("held-back shape+colour queries   precision@10  recall@10")
    for name, figures in (("trained", trained.figures), ("untrained twin", trained.untrained)):
        typer.echo(
            f"  {name:<30} {figures['precision_at_10']:.3f} "
            f"({figures['precision_lift']:.1f}x)  {figures['recall_at_10']:.3f} "
            f"({figures['recall_lift']:.1f}x)"
        )
    figures = trained.figures
    typer.echo(
        f"  {'chance':<30} {figures['chance_precision_at_10']:.3f}         "
        f"{figures['chance_recall_at_10']:.3f}"
    )
    typer.echo(f"export it: photosearch model export --arch {CONFIG} --pretrained {path}")
