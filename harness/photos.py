"""Photos the tests and benchmarks own: variants of the demo photos (real JPEGs, each of a
distinct content, that cost what a stock photo costs to decode), a night's churn among them,
altered copies as re-uploads make them, and catalogues of small synthetic JPEGs.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from core.demo import write_demo_photos

VARIANTS = "variants"  # sub-folder of generated photos, apart from the demo photos
LONG_SIDE = (640, 1280)  # pixels of a variant's longest side, drawn uniformly
DISTINCT = 256  # distinct small JPEGs in a catalogue, written over and over
PER_FOLDER = 1000


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


# -- altered copies, as re-uploads make them ------------------------------------------------------


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")  # lossless: only the alteration itself changes the pixels
    return buffer.getvalue()


def _jpeg(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _crop(image: Image.Image, keep: float) -> Image.Image:
    """The middle `keep` of each side."""
    width, height = image.size
    dx, dy = round(width * (1 - keep) / 2), round(height * (1 - keep) / 2)
    return image.crop((dx, dy, width - dx, height - dy))


def _resize(image: Image.Image, scale: float) -> Image.Image:
    width, height = image.size
    return image.resize((max(1, round(width * scale)), max(1, round(height * scale))))


def _rotate(image: Image.Image, degrees: float) -> Image.Image:
    """Rotated, then cropped to the middle 90% so that no filled corner is left."""
    return _crop(image.rotate(degrees, resample=Image.Resampling.BICUBIC), 0.9)


# Kind -> the altered copy's file, from the original decoded in full (RGB).
ALTERATIONS: dict[str, Callable[[Image.Image], bytes]] = {
    "crop90": lambda image: _png(_crop(image, 0.9)),
    "crop75": lambda image: _png(_crop(image, 0.75)),
    "jpeg70": lambda image: _jpeg(image, 70),
    "jpeg30": lambda image: _jpeg(image, 30),
    "flip": lambda image: _png(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)),
    "resize50": lambda image: _png(_resize(image, 0.5)),
    "resize25": lambda image: _png(_resize(image, 0.25)),
    "rotate3": lambda image: _png(_rotate(image, 3)),
    "bright120": lambda image: _png(ImageEnhance.Brightness(image).enhance(1.2)),
}


# -- catalogues of small photos -----------------------------------------------------------------


def small_photo(i: int, size: int = 32) -> bytes:
    """A distinct small JPEG: noise seeded by i (the tiny model sees 32x32 anyway)."""
    pixels = np.random.default_rng(i).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def write_catalogue(root: Path, count: int) -> None:
    images = [small_photo(i) for i in range(DISTINCT)]
    for i in range(count):
        folder = root / f"f{i // PER_FOLDER:05d}"
        if i % PER_FOLDER == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"p{i:08d}.jpg").write_bytes(images[i % DISTINCT])
