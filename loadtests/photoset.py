"""The photo folder a load test owns: the demo photos, variants of them, and a night's churn.

Variants are real JPEGs cut from the demo photographs (crop, flip, colour, size, quality), so
that decoding and embedding them costs what a stock photo costs; each has a distinct content.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageEnhance, ImageOps

from core.demo import write_demo_photos

VARIANTS = "variants"  # sub-folder of generated photos, apart from the demo photos
LONG_SIDE = (640, 1280)  # pixels of a variant's longest side, drawn uniformly


@dataclass(frozen=True)
class Churn:
    """What changed in the folder before a sync: what that sync must find."""

    added: tuple[str, ...]
    changed: tuple[str, ...]
    deleted: tuple[str, ...]


def _originals(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def variant(
    original: Path, seed: int, size: tuple[int, int] | None = None, quality: int | None = None
) -> bytes:
    """A JPEG cut from `original`: a different photo of the same scene, by seed; of `size`
    and `quality` where given (the benchmarks' photos), else of a size and quality drawn."""
    r = random.Random(seed)
    with Image.open(original) as img:
        image = ImageOps.exif_transpose(img).convert("RGB")
    w, h = image.size
    share = r.uniform(0.55, 1.0)
    cw, ch = max(32, int(w * share)), max(32, int(h * share))
    x, y = r.randrange(w - cw + 1), r.randrange(h - ch + 1)
    image = image.crop((x, y, x + cw, y + ch))
    if r.random() < 0.5:
        image = ImageOps.mirror(image)
    image = ImageEnhance.Color(image).enhance(r.uniform(0.6, 1.4))
    image = ImageEnhance.Brightness(image).enhance(r.uniform(0.8, 1.2))
    scale = r.randint(*LONG_SIDE) / max(image.size)
    size = size or (max(1, round(cw * scale)), max(1, round(ch * scale)))
    out = io.BytesIO()
    image.resize(size, Image.Resampling.BICUBIC).save(
        out, "JPEG", quality=quality or r.randint(78, 92)
    )
    return out.getvalue()


def sized(folder: Path, count: int, size: tuple[int, int], quality: int = 90) -> list[bytes]:
    """`count` distinct JPEGs of exactly `size`, cut from the demo photos (written into
    `folder`): what the decode and indexing benchmarks read."""
    write_demo_photos(folder)
    originals = _originals(folder)
    return [variant(originals[i % len(originals)], i, size, quality) for i in range(count)]


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)  # the indexer never lists a half-written photo


def prepare(folder: Path, variants: int, seed: int = 0) -> list[str]:
    """The demo photos plus `variants` generated ones, and nothing else: a folder that a run
    starts from whatever an earlier run's churn left. Returns the relative paths."""
    write_demo_photos(folder)
    originals = _originals(folder)
    target = folder / VARIANTS
    target.mkdir(exist_ok=True)
    wanted = {f"{i:06d}.jpg": i for i in range(variants)}
    for path in target.iterdir():
        if path.name not in wanted:
            path.unlink()
    for name, i in wanted.items():
        data = variant(originals[i % len(originals)], seed * 1_000_003 + i)
        path = target / name
        # Equal bytes keep their mtime, so a restart does not index them again.
        if not path.is_file() or path.read_bytes() != data:
            _write(path, data)
    return [p.relative_to(folder).as_posix() for p in _originals(folder)] + [
        f"{VARIANTS}/{name}" for name in wanted
    ]


def churn(folder: Path, add: int, change: int, delete: int, seed: int) -> Churn:
    """A night's changes among the variants: new photos, re-edited ones, removed ones."""
    r = random.Random(seed)
    originals = _originals(folder)
    target = folder / VARIANTS
    present = sorted(p.name for p in target.glob("*.jpg"))
    if change + delete > len(present):
        raise ValueError(
            f"cannot change {change} and delete {delete} of {len(present)} generated photos: "
            "give more --variants"
        )
    picked = r.sample(present, change + delete)
    changed, deleted = picked[:change], picked[change:]
    for name in changed:
        _write(target / name, variant(originals[r.randrange(len(originals))], r.getrandbits(48)))
    for name in deleted:
        (target / name).unlink()
    start = int(present[-1][:6]) + 1 if present else 0
    added = [f"{i:06d}.jpg" for i in range(start, start + add)]
    for i, name in enumerate(added):
        seed_i = r.getrandbits(48) + i
        _write(target / name, variant(originals[seed_i % len(originals)], seed_i))
    return Churn(
        tuple(f"{VARIANTS}/{n}" for n in added),
        tuple(f"{VARIANTS}/{n}" for n in changed),
        tuple(f"{VARIANTS}/{n}" for n in deleted),
    )
