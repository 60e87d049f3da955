"""The automatic tags' truth of synthetic photos: labels.tsv and vocabulary.txt beside them.

A photo's labels are the shape, the colour and the background texture its content record says
it shows, "plain" included: every photo shows exactly one of each, so every photo has three
true tags out of the 18 names (6 shapes, 8 colours, 4 textures) and chance is easy to state.
Size, position and count are not tags: no single word names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.atomicfile import write_atomic
from model.synthetic import COLOURS, SHAPES, TEXTURES, Content, SyntheticPhoto

LABELS_FILE = "labels.tsv"
VOCABULARY_FILE = "vocabulary.txt"
# What each tag is, for figures per kind (loadtests/bench_tagging.py).
KINDS: dict[str, tuple[str, ...]] = {
    "shape": SHAPES,
    "colour": tuple(COLOURS),
    "texture": TEXTURES,
}


def vocabulary() -> tuple[str, ...]:
    """Every name a synthetic photo's labels use: shapes, then colours, then textures."""
    return tuple(name for names in KINDS.values() for name in names)


def labels(content: Content) -> tuple[str, str, str]:
    """The tags a photo of `content` should earn: its shape, colour and texture."""
    return (content.shape, content.colour, content.texture)


def write_labels(photos: Sequence[SyntheticPhoto], out: Path) -> tuple[Path, Path]:
    """OUT/labels.tsv (photo id TAB shape,colour,texture) and OUT/vocabulary.txt."""
    out.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{p.id}\t{','.join(labels(p.content))}\n" for p in photos)
    names = "".join(f"{name}\n" for name in vocabulary())
    write_atomic(out / LABELS_FILE, rows)
    write_atomic(
        out / VOCABULARY_FILE, "# shapes, colours and textures of synthetic photos\n" + names
    )
    return out / LABELS_FILE, out / VOCABULARY_FILE
