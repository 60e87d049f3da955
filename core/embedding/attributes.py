"""A photo's visual attributes from its decoded pixels: size, orientation, palette colours."""

from __future__ import annotations

import re
from functools import cache

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from core.payload import PhotoPayload

# The named palette, each colour by its sRGB anchor, the swatch the documentation shows.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (210, 35, 35),
    "orange": (240, 135, 25),
    "yellow": (240, 215, 40),
    "green": (50, 160, 60),
    "teal": (0, 145, 145),
    "blue": (40, 75, 210),
    "purple": (130, 45, 170),
    "pink": (240, 130, 180),
    "brown": (125, 80, 40),
    "black": (20, 20, 20),
    "grey": (128, 128, 128),
    "white": (245, 245, 245),
}
# A coloured pixel takes the name of the anchor nearest to it in CIELAB (distances there
# follow what people see as different). A name spans more than one anchor where its usual
# colours are far apart in lightness: sky blue is blue and pale pink is pink, not teal and
# white. model/synthetic.py's colours, with their jitter, fall each to its own name.
_EXTRA_ANCHORS: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("red", (130, 20, 30)),  # maroon
    ("green", (150, 200, 80)),  # lime
    ("green", (40, 85, 40)),  # forest
    ("blue", (115, 170, 230)),  # sky
    ("blue", (20, 30, 100)),  # navy
    ("purple", (180, 140, 215)),  # lavender
    ("pink", (250, 195, 210)),  # pale pink
    ("pink", (230, 40, 140)),  # magenta
    ("brown", (195, 155, 110)),  # tan
    ("yellow", (245, 230, 140)),  # cream, khaki
)
NAMES = tuple(PALETTE)
# The payload fields visual_attributes() writes (core/vectorstore indexes them).
FIELDS = ("width", "height", "aspect_ratio", "orientation", "colors", "color_shares", "copy_space")

# A pixel whose chroma (C*) is below this is a shade of grey: its lightness alone names it
# (black, grey or white), whatever hue its few units of a* and b* lean to. JPEG noise and the
# tint of a white wall or beige paper stay under it; the palette's least saturated colour
# (brown) is at about 35. In the dark the bound rises by DARK_CHROMA per unit of L* under
# BLACK_BELOW: there the eye sees little colour and a little noise is a lot of chroma
# (RGB 15 +- 15 reaches C* 20), while navy (RGB 0, 0, 128: L* 13, C* 80) stays blue.
ACHROMATIC_CHROMA = 14.0
DARK_CHROMA = 1.2
BLACK_BELOW = 25.0  # L* under this: black
WHITE_ABOVE = 85.0  # L* above this: white
# Shares at or above these are listed: `colors` names the dominant ones, `color_shares`
# keeps the smaller ones for a filter's minimum share.
COLOR_MIN_SHARE = 0.05
SHARE_MIN = 0.01
# Square: a width/height ratio within 5% of 1 (a 1000x960 photo is square, 1000x940 is not).
SQUARE_TOLERANCE = 0.05
# Copy space (room for a caption): one palette colour covers at least 60% of the photo and
# those pixels are plain, their lightness spread (standard deviation of L*) under 10, so a
# clear sky or a studio backdrop counts and a lawn or a crowd in one hue does not. Stored
# as 1 or 0.
COPY_SPACE_SHARE = 0.6
COPY_SPACE_SPREAD = 10.0
# The attributes are computed on a sample of at most this many pixels on the image's longer
# side: 2,000 to 4,000 pixels are plenty for shares to the nearest percent, and cheap.
SAMPLE_SIDE = 64

_HEX = re.compile(r"#?([0-9a-fA-F]{6})")
# sRGB (D65) -> CIE XYZ, and the D65 white point.
_TO_XYZ = np.array(
    [
        [0.4124564, 0.3575761, 0.1804375],
        [0.2126729, 0.7151522, 0.0721750],
        [0.0193339, 0.1191920, 0.9503041],
    ],
    dtype=np.float32,
)
_WHITE = np.array([0.95047, 1.0, 1.08883], dtype=np.float32)

FloatArray = NDArray[np.float32]


def to_lab(rgb: NDArray[np.uint8]) -> FloatArray:
    """sRGB pixels [..., 3] (0..255) -> CIELAB [..., 3] (L* 0..100)."""
    c = rgb.astype(np.float32) / np.float32(255.0)
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = (linear @ _TO_XYZ.T) / _WHITE
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    lab: FloatArray = np.stack(
        [116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])],
        axis=-1,
    ).astype(np.float32)
    return lab


_GREYS = np.array([NAMES.index("black"), NAMES.index("grey"), NAMES.index("white")])
_COLOURED = [
    *((name, rgb) for name, rgb in PALETTE.items() if NAMES.index(name) not in _GREYS),
    *_EXTRA_ANCHORS,
]
_ANCHORS = to_lab(np.array([rgb for _, rgb in _COLOURED], dtype=np.uint8))
_ANCHOR_NORMS = (_ANCHORS * _ANCHORS).sum(axis=1)
_ANCHOR_NAME = np.array([NAMES.index(name) for name, _ in _COLOURED])


def classify(lab: FloatArray) -> NDArray[np.intp]:
    """The palette index of each CIELAB pixel [N, 3]: black, grey or white by its lightness
    for a pixel of little chroma, else the name of the nearest coloured anchor."""
    # |x - a|^2 = |x|^2 - 2 x.a + |a|^2: [N, anchors], never [N, anchors, 3].
    distances = (lab * lab).sum(axis=1)[:, None] - 2 * lab @ _ANCHORS.T + _ANCHOR_NORMS
    nearest = _ANCHOR_NAME[distances.argmin(axis=1)]
    lightness = lab[:, 0]
    chroma = np.hypot(lab[:, 1], lab[:, 2])
    bound = ACHROMATIC_CHROMA + DARK_CHROMA * np.maximum(BLACK_BELOW - lightness, 0)
    shade = _GREYS[(lightness >= BLACK_BELOW).astype(np.intp) + (lightness > WHITE_ABOVE)]
    return np.where(chroma < bound, shade, nearest)


def nearest_color(value: str) -> str:
    """The palette name nearest to a hex colour, "#rrggbb" or "rrggbb"."""
    match = _HEX.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a hex colour: give #rrggbb or rrggbb, e.g. #1e90ff")
    rgb = np.frombuffer(bytes.fromhex(match[1]), dtype=np.uint8).reshape(1, 3)
    return NAMES[int(classify(to_lab(rgb))[0])]


# A photo's pixels are named through a table of every colour at 5 bits a channel (32,768
# entries, built once): a lookup per pixel instead of a CIELAB conversion and 21 distances.
# A channel is off by at most 4 of 255 there, under what JPEG itself changes.
_BITS = 5
_SHIFT = 8 - _BITS


@cache
def _tables() -> tuple[NDArray[np.uint8], NDArray[np.float16]]:
    """The palette index and the L* of each 5-bit colour, indexed by r << 10 | g << 5 | b:
    small types (96 KB in all), so that a lookup right after a decode stays in the cache."""
    levels = (np.arange(1 << _BITS, dtype=np.uint16) << _SHIFT) + (1 << (_SHIFT - 1))
    r, g, b = np.meshgrid(levels, levels, levels, indexing="ij")
    lab = to_lab(np.stack([r, g, b], axis=-1).reshape(-1, 3).astype(np.uint8))
    return classify(lab).astype(np.uint8), lab[:, 0].astype(np.float16)


_PLACES = np.array([1 << (2 * _BITS), 1 << _BITS, 1], dtype=np.uint16)


def _lookup(rgb: NDArray[np.uint8]) -> NDArray[np.uint16]:
    index: NDArray[np.uint16] = (rgb >> _SHIFT).astype(np.uint16) @ _PLACES
    return index


def orientation_of(width: int, height: int) -> str:
    ratio = width / height
    if abs(ratio - 1) <= SQUARE_TOLERANCE:
        return "square"
    return "landscape" if ratio > 1 else "portrait"


def _sample(image: Image.Image) -> NDArray[np.uint8]:
    """The image's pixels [N, 3], every k-th of every k-th row, so that the longer side keeps
    at most SAMPLE_SIDE: the image is already a smooth resize of the photo (the encoder's), and
    a nearest-neighbour resize reads only the pixels it keeps (a box filter costs more than the
    rest of the attributes)."""
    step = -(-max(image.size) // SAMPLE_SIDE)
    if step > 1:
        width, height = image.size
        size = (-(-width // step), -(-height // step))
        image = image.resize(size, Image.Resampling.NEAREST)
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.asarray(rgb, dtype=np.uint8).reshape(-1, 3)


def visual_attributes(image: Image.Image, original_size: tuple[int, int]) -> PhotoPayload:
    """The payload's visual fields (FIELDS) of an upright RGB image, however reduced;
    `original_size`: the original's upright width and height, in pixels."""
    width, height = original_size
    names_of, lightness_of = _tables()
    index = _lookup(_sample(image))
    names = names_of[index]
    counts: list[int] = np.bincount(names, minlength=len(NAMES)).tolist()
    shares = [count / max(len(names), 1) for count in counts]
    # Largest first; equal shares in the palette's order.
    order = sorted(range(len(NAMES)), key=lambda i: (-counts[i], i))
    top = order[0]
    # The spread only where the share can make copy space (most photos cannot).
    copy_space = shares[top] >= COPY_SPACE_SHARE and bool(
        lightness_of[index[names == top]].astype(np.float32).std() < COPY_SPACE_SPREAD
    )
    return {
        "width": width,
        "height": height,
        "aspect_ratio": round(width / height, 3),
        "orientation": orientation_of(width, height),
        "colors": [NAMES[i] for i in order if shares[i] >= COLOR_MIN_SHARE],
        "color_shares": {NAMES[i]: round(shares[i], 3) for i in order if shares[i] >= SHARE_MIN},
        # 0 or 1, not a bool: a filter on Qdrant Edge can match only that (engine.Flag).
        "copy_space": int(copy_space),
    }
