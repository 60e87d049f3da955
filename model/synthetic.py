"""Synthetic captioned photos: seeded shapes on backgrounds, each with the record of what it shows.

A photo's truth is its content record (shape, colour, size, position, count, texture), never its
title or tags: those are written as a photographer would, naming some attributes, sometimes a
synonym, sometimes nothing at all, so that keyword search finds only part of what a query means.
No torch here: the indexer's tests and the judgement set need the photos without the trainer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from core.atomicfile import write_atomic

SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (35, 60, 220),
    "yellow": (240, 220, 30),
    "orange": (245, 130, 20),
    "purple": (140, 40, 170),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}
SIZES = ("small", "large")
POSITIONS = ("left", "right", "top", "bottom", "centre")
COUNTS = (1, 2, 3)
TEXTURES = ("plain", "striped", "dotted", "checked")

# The fields of a Content, in the order a caption names them.
ATTRIBUTES = ("shape", "colour", "size", "position", "count", "texture")
COUNT_WORDS = {1: "one", 2: "two", 3: "three"}
PLURALS = {"cross": "crosses"}
POSITION_PHRASES = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "centre": "in the centre",
}
# Where a single shape sits, as fractions of the side; several shapes are spread instead.
_CENTRES = {
    "left": (0.27, 0.5),
    "right": (0.73, 0.5),
    "top": (0.5, 0.27),
    "bottom": (0.5, 0.73),
    "centre": (0.5, 0.5),
}
_LAYOUTS = {
    2: (((0.28, 0.5), (0.72, 0.5)), ((0.5, 0.28), (0.5, 0.72)), ((0.3, 0.3), (0.7, 0.7))),
    3: (((0.2, 0.5), (0.5, 0.5), (0.8, 0.5)), ((0.5, 0.25), (0.27, 0.72), (0.73, 0.72))),
}
# Radius as a fraction of the side, by size and by whether the shape is alone.
_RADII = {
    ("small", True): 0.12,
    ("large", True): 0.22,
    ("small", False): 0.09,
    ("large", False): 0.14,
}

# What a photographer might write instead of the plain word: keyword search misses these.
_SYNONYMS = {
    "circle": ("disc", "round"),
    "square": ("block",),
    "triangle": ("pyramid",),
    "star": ("starburst",),
    "diamond": ("rhombus",),
    "cross": ("plus",),
    "red": ("crimson", "scarlet"),
    "green": ("emerald",),
    "blue": ("navy", "azure"),
    "yellow": ("lemon",),
    "orange": ("amber",),
    "purple": ("violet",),
    "white": ("ivory",),
    "black": ("ebony",),
}
_GENERIC_TITLES = ("Untitled", "Composition", "Study", "Geometry", "Minimal", "Form")
_PHOTOGRAPHERS = ("A. Moreau", "K. Tanaka", "R. Osei", "L. Novak", "M. Silva")
DEFAULT_SEED = 0
DEFAULT_COUNT = 400
FILE_SIZE = 64
MANIFEST = "photos.jsonl"


@dataclass(frozen=True)
class Content:
    """What a synthetic photo shows: the truth its judgements are graded on."""

    shape: str
    colour: str
    size: str
    position: str | None  # one shape only; several are spread over the frame
    count: int
    texture: str

    def caption(self) -> str:
        """Every attribute in one sentence: 'two small red circles on a striped background'."""
        return caption(self, ATTRIBUTES)


@dataclass(frozen=True)
class SyntheticPhoto:
    """One generated photo: its file name (the indexer's photo id), content and metadata."""

    id: str
    seed: int
    index: int
    content: Content
    title: str
    tags: tuple[str, ...]
    photographer: str

    def row(self) -> dict[str, object]:
        """Its line of photos.jsonl; no `id`, so the photo id is the file name either way."""
        return {
            "path": self.id,
            "title": self.title,
            "tags": list(self.tags),
            "photographer": self.photographer,
        }


def noun(content: Content) -> str:
    if content.count == 1:
        return content.shape
    return PLURALS.get(content.shape, content.shape + "s")


def caption(content: Content, attributes: Sequence[str]) -> str:
    """A sentence naming the count and the given attributes of `content`; without "shape" the
    shape is just 'shape': 'two red shapes on a dotted background'."""
    words = [COUNT_WORDS[content.count] if content.count > 1 else "a"]
    if "size" in attributes:
        words.append(content.size)
    if "colour" in attributes:
        words.append(content.colour)
    if "shape" in attributes:
        words.append(noun(content))
    else:
        words.append("shape" if content.count == 1 else "shapes")
    if "position" in attributes and content.position is not None:
        words.append(POSITION_PHRASES[content.position])
    if "texture" in attributes:
        words.append(f"on a {content.texture} background")
    text = " ".join(words)
    return text.replace("a orange", "an orange")


def _choice(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def draw_content(rng: np.random.Generator) -> Content:
    """A content record drawn uniformly per attribute (one shape more often than several)."""
    count = int(rng.choice(COUNTS, p=(0.6, 0.2, 0.2)))
    return Content(
        shape=_choice(rng, SHAPES),
        colour=_choice(rng, tuple(COLOURS)),
        size=_choice(rng, SIZES),
        position=_choice(rng, POSITIONS) if count == 1 else None,
        count=count,
        texture=_choice(rng, TEXTURES),
    )


def _polygon(shape: str, cx: float, cy: float, r: float, turn: float) -> list[tuple[float, float]]:
    """The outline of a non-round shape, turned by `turn` radians."""
    if shape == "square":
        points = [(math.pi / 4 + k * math.pi / 2, r * 0.85 * math.sqrt(2)) for k in range(4)]
    elif shape == "diamond":
        points = [(k * math.pi / 2, r * (1.0 if k % 2 else 0.7)) for k in range(4)]
    elif shape == "triangle":
        points = [(-math.pi / 2 + k * 2 * math.pi / 3, r * 1.1) for k in range(3)]
    elif shape == "star":
        points = [
            (-math.pi / 2 + k * math.pi / 5, r * (1.1 if k % 2 == 0 else 0.45)) for k in range(10)
        ]
    elif shape == "cross":
        a, b = r, r * 0.35
        corners = [(b, a), (b, b), (a, b), (a, -b), (b, -b), (b, -a)]
        corners += [(-x, -y) for x, y in corners]
        points = [(math.atan2(y, x), math.hypot(x, y)) for x, y in corners]
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return [(cx + d * math.cos(t + turn), cy + d * math.sin(t + turn)) for t, d in points]


def _background(rng: np.random.Generator, texture: str, side: int) -> Image.Image:
    """A mid-grey ground (so white and black shapes both stand out) with a faint texture."""
    tone = int(rng.integers(105, 150))
    tint = rng.integers(-8, 9, size=3)
    base = tuple(int(np.clip(tone + t, 0, 255)) for t in tint)
    shade = int(rng.choice((-28, 28)))  # one shade for all channels: the ground stays grey
    mark = tuple(int(np.clip(c + shade, 0, 255)) for c in base)
    image = Image.new("RGB", (side, side), base)
    draw = ImageDraw.Draw(image)
    step = int(rng.integers(side // 10, side // 6))
    if texture == "striped":
        for x in range(0, side * 2, step):
            draw.line([(x, 0), (x - side, side)], fill=mark, width=max(1, step // 3))
    elif texture == "dotted":
        dot = max(1, step // 5)
        for x in range(step // 2, side, step):
            for y in range(step // 2, side, step):
                draw.ellipse([x - dot, y - dot, x + dot, y + dot], fill=mark)
    elif texture == "checked":
        for x in range(0, side, step):
            for y in range(0, side, step):
                if (x // step + y // step) % 2:
                    draw.rectangle([x, y, x + step - 1, y + step - 1], fill=mark)
    return image


def render(content: Content, rng: np.random.Generator, side: int = FILE_SIZE) -> Image.Image:
    """The picture of `content`, its placement, hue and ground jittered by `rng`."""
    image = _background(rng, content.texture, side)
    draw = ImageDraw.Draw(image)
    alone = content.count == 1
    if alone:
        assert content.position is not None
        centres: Sequence[tuple[float, float]] = (_CENTRES[content.position],)
    else:
        layouts = _LAYOUTS[content.count]
        centres = layouts[int(rng.integers(len(layouts)))]
    radius = _RADII[(content.size, alone)] * side
    colour = np.array(COLOURS[content.colour])
    for fx, fy in centres:
        cx = (fx + rng.uniform(-0.04, 0.04)) * side
        cy = (fy + rng.uniform(-0.04, 0.04)) * side
        r = radius * rng.uniform(0.9, 1.1)
        fill = tuple(int(c) for c in np.clip(colour + rng.integers(-15, 16, size=3), 0, 255))
        if content.shape == "circle":
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        else:
            turn = rng.uniform(-0.2, 0.2)
            draw.polygon(_polygon(content.shape, cx, cy, r, turn), fill=fill)
    return image


def _word(rng: np.random.Generator, word: str) -> str:
    """The attribute's word, or now and then a synonym a keyword search does not match."""
    synonyms = _SYNONYMS.get(word, ())
    return _choice(rng, synonyms) if synonyms and rng.random() < 0.3 else word


def describe(content: Content, rng: np.random.Generator) -> tuple[str, tuple[str, ...]]:
    """A title and tags as a photographer writes them: part of the truth, in their own words."""
    style = rng.random()
    number = int(rng.integers(1, 200))
    if style < 0.3:
        title = f"{_choice(rng, _GENERIC_TITLES)} no. {number}"
    elif style < 0.6:
        title = f"{_word(rng, content.colour).capitalize()} {_word(rng, content.shape)}"
    elif style < 0.8:
        title = f"{_word(rng, content.shape).capitalize()} on {content.texture} ground"
    else:
        title = f"{_word(rng, content.colour).capitalize()} study no. {number}"
    tags = {"abstract", "geometry"} if rng.random() < 0.5 else {"minimal"}
    for word, chance in ((content.shape, 0.5), (content.colour, 0.5), (content.texture, 0.3)):
        if rng.random() < chance:
            tags.add(_word(rng, word))
    return title, tuple(sorted(tags))


def photo_name(index: int) -> str:
    return f"synthetic-{index:04d}.png"


def generate(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[SyntheticPhoto]:
    """The records of `count` photos; photo `index` of a seed is the same whatever the count."""
    return [_photo(seed, index) for index in range(count)]


def _rng(seed: int, index: int, stream: int) -> np.random.Generator:
    # One stream for the content and metadata, another for the pixels: rendering at another
    # size never changes what a photo shows.
    return np.random.default_rng([seed, index, stream])


def _photo(seed: int, index: int) -> SyntheticPhoto:
    rng = _rng(seed, index, 0)
    content = draw_content(rng)
    title, tags = describe(content, rng)
    photographer = _choice(rng, _PHOTOGRAPHERS)
    return SyntheticPhoto(photo_name(index), seed, index, content, title, tags, photographer)


def image_of(photo: SyntheticPhoto, side: int = FILE_SIZE) -> Image.Image:
    """The photo's pixels; the same for the same seed, index and side."""
    return render(photo.content, _rng(photo.seed, photo.index, 1), side)


def png_bytes(image: Image.Image) -> bytes:
    out = BytesIO()
    image.save(out, format="PNG", optimize=False)
    return out.getvalue()


def write_photos(photos: Sequence[SyntheticPhoto], folder: Path) -> None:
    """Each photo as a PNG file named by its id, and photos.jsonl with titles and tags."""
    folder.mkdir(parents=True, exist_ok=True)
    for photo in photos:
        write_atomic(folder / photo.id, png_bytes(image_of(photo)))
    rows = "".join(json.dumps(p.row(), ensure_ascii=False) + "\n" for p in photos)
    write_atomic(folder / MANIFEST, rows)


def content_rows(photos: Sequence[SyntheticPhoto]) -> Iterator[dict[str, object]]:
    """The truth of each photo, for a reader that wants to check a judgement by hand."""
    for photo in photos:
        yield {"id": photo.id, **asdict(photo.content)}
