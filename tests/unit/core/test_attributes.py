"""Visual attributes on generated images of known colours and shapes: the palette names, their
shares (within 0.02 of the drawn areas: the 64-pixel sample's box filter blurs the edges), a hex
colour's nearest name, orientation, aspect ratio, copy space and the EXIF-turned size."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from core.embedding.attributes import (
    FIELDS,
    NAMES,
    PALETTE,
    nearest_color,
    orientation_of,
    visual_attributes,
)
from core.embedding.images import prepare_photo
from core.embedding.manifest import ImagePreprocessing
from model.synthetic import COLOURS
from tests.support.images import encode

SHARE_TOLERANCE = 0.02
SPEC = ImagePreprocessing(size=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def plain(colour: tuple[int, int, int], size: tuple[int, int] = (300, 200)) -> Image.Image:
    return Image.new("RGB", size, colour)


def noisy(
    colour: tuple[int, int, int], size: tuple[int, int], spread: int, seed: int = 0
) -> Image.Image:
    """A colour with uniform noise of +-spread on each channel (the synthetic photos' jitter)."""
    rng = np.random.default_rng(seed)
    pixels = np.array(colour) + rng.integers(-spread, spread + 1, size=(size[1], size[0], 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def test_the_palette_has_the_twelve_names_of_the_contract() -> None:
    assert NAMES == (
        "red", "orange", "yellow", "green", "teal", "blue",
        "purple", "pink", "brown", "black", "grey", "white",
    )  # fmt: skip
    assert FIELDS == (
        "width", "height", "aspect_ratio", "orientation", "colors", "color_shares", "copy_space",
    )  # fmt: skip


@pytest.mark.parametrize("name", list(PALETTE))
def test_each_palette_anchor_is_its_own_name(name: str) -> None:
    found = visual_attributes(plain(PALETTE[name]), (300, 200))
    assert found["colors"] == [name]
    assert found["color_shares"] == {name: 1.0}


@pytest.mark.parametrize("name", list(COLOURS))
def test_the_synthetic_photos_colours_keep_their_names_through_their_jitter(name: str) -> None:
    # model/synthetic.py draws its shapes in these colours +-15 per channel.
    found = visual_attributes(noisy(COLOURS[name], (256, 256), 15), (256, 256))
    assert found["colors"] == [name] and found["color_shares"] == {name: 1.0}


@pytest.mark.parametrize(
    ("hex_colour", "name"),
    [
        ("#ff0000", "red"),
        ("ffa500", "orange"),
        ("#FFD700", "yellow"),
        ("#228b22", "green"),
        ("#008080", "teal"),
        ("#1e90ff", "blue"),
        ("#87ceeb", "blue"),  # sky blue: light, still blue
        ("#000080", "blue"),  # navy: dark, still blue
        ("#4b0082", "purple"),
        ("#ff69b4", "pink"),
        ("#ffc0cb", "pink"),  # pale pink, not white
        ("#8b4513", "brown"),
        ("#d2b48c", "brown"),  # tan
        ("#0a0a0a", "black"),
        ("#808080", "grey"),
        ("#708090", "grey"),  # slate grey: too little chroma for blue
        ("#ffffff", "white"),
        ("#f5f5dc", "white"),  # beige paper
    ],
)
def test_a_hex_colour_maps_to_its_nearest_palette_name(hex_colour: str, name: str) -> None:
    assert nearest_color(hex_colour) == name


@pytest.mark.parametrize("value", ["red", "#fff", "#12345g", "1234567", "", "# ff0000"])
def test_a_value_that_is_not_six_hex_digits_is_refused_with_the_form_to_use(value: str) -> None:
    with pytest.raises(ValueError, match="#rrggbb"):
        nearest_color(value)


def test_shares_follow_the_areas_largest_first() -> None:
    # A 200x100 image: blue left half, the right half yellow above (30%) and red below (20%).
    image = plain(PALETTE["blue"], (200, 100))
    draw = ImageDraw.Draw(image)
    draw.rectangle([100, 0, 199, 59], fill=PALETTE["yellow"])
    draw.rectangle([100, 60, 199, 99], fill=PALETTE["red"])
    found = visual_attributes(image, (200, 100))
    assert found["colors"] == ["blue", "yellow", "red"]
    expected = {"blue": 0.5, "yellow": 0.3, "red": 0.2}
    for name, share in expected.items():
        assert abs(found["color_shares"][name] - share) <= SHARE_TOLERANCE, (name, found)
    # The blurred edges may add other names, under the 5% that `colors` lists.
    assert sum(found["color_shares"].values()) == pytest.approx(1.0, abs=SHARE_TOLERANCE)


def test_a_small_share_is_kept_but_not_listed_and_a_speck_is_dropped() -> None:
    # 1000x1000 white, a green square of 3% and a red one of 0.25%.
    image = plain(PALETTE["white"], (1000, 1000))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, 0, 172, 172], fill=PALETTE["green"])  # 173^2 = 2.99%
    draw.rectangle([500, 500, 549, 549], fill=PALETTE["red"])  # 50^2 = 0.25%
    found = visual_attributes(image, (1000, 1000))
    assert found["colors"] == ["white"]  # green is under the 5% of `colors`
    assert abs(found["color_shares"]["green"] - 0.03) <= SHARE_TOLERANCE
    assert "red" not in found["color_shares"]  # under the 1% that color_shares keeps
    assert all(share == round(share, 3) for share in found["color_shares"].values())


@pytest.mark.parametrize(
    ("size", "orientation", "ratio"),
    [
        ((3000, 2000), "landscape", 1.5),
        ((2000, 3000), "portrait", 0.667),
        ((1000, 1000), "square", 1.0),
        ((1000, 960), "square", 1.042),  # within 5% of square
        ((960, 1000), "square", 0.96),
        ((1000, 940), "landscape", 1.064),
        ((940, 1000), "portrait", 0.94),
        ((6000, 1000), "landscape", 6.0),
    ],
)
def test_orientation_and_aspect_ratio_of_the_original_size(
    size: tuple[int, int], orientation: str, ratio: float
) -> None:
    # The pixels given are a reduced copy: the size is the original's.
    found = visual_attributes(plain(PALETTE["grey"], (60, 40)), size)
    assert (found["width"], found["height"]) == size
    assert found["orientation"] == orientation == orientation_of(*size)
    assert found["aspect_ratio"] == ratio


def test_copy_space_is_one_plain_colour_over_most_of_the_photo() -> None:
    # A small subject on a plain backdrop: copy space.
    backdrop = plain(PALETTE["teal"], (400, 300))
    ImageDraw.Draw(backdrop).ellipse([20, 20, 140, 140], fill=PALETTE["orange"])  # ~9%
    assert visual_attributes(backdrop, (400, 300))["copy_space"] == 1
    # A jittered backdrop (JPEG-like noise) is still plain.
    assert visual_attributes(noisy(COLOURS["blue"], (400, 300), 15), (400, 300))["copy_space"] == 1
    # Two colours, half and half: no colour holds 60%.
    halves = plain(PALETTE["white"], (400, 300))
    ImageDraw.Draw(halves).rectangle([200, 0, 399, 299], fill=PALETTE["black"])
    assert visual_attributes(halves, (400, 300))["copy_space"] == 0
    # One hue over the whole photo, but a texture (stripes of light and dark green): not plain.
    stripes = plain((30, 120, 40), (400, 300))
    draw = ImageDraw.Draw(stripes)
    for left in range(0, 400, 40):
        draw.rectangle([left, 0, left + 19, 299], fill=(120, 220, 110))
    found = visual_attributes(stripes, (400, 300))
    assert found["colors"] == ["green"] and found["copy_space"] == 0


@pytest.mark.parametrize(
    ("exif_orientation", "upright"),
    [(1, (600, 300)), (3, (600, 300)), (5, (300, 600)), (6, (300, 600)), (7, (300, 600)),
     (8, (300, 600))],
)  # fmt: skip
def test_the_size_is_the_originals_turned_upright_by_its_exif(
    exif_orientation: int, upright: tuple[int, int]
) -> None:
    # Stored 600x300 with an orange left third; decoded smaller than stored (draft mode).
    stored = plain(PALETTE["blue"], (600, 300))
    ImageDraw.Draw(stored).rectangle([0, 0, 199, 299], fill=PALETTE["orange"])
    exif = Image.Exif()
    exif[0x0112] = exif_orientation
    pixels, found = prepare_photo(encode(stored, "JPEG", quality=95, exif=exif), SPEC)
    assert pixels.shape == (32, 32, 3)
    assert (found["width"], found["height"]) == upright
    assert found["orientation"] == ("landscape" if upright[0] > upright[1] else "portrait")
    assert found["colors"] == ["blue", "orange"]
    assert abs(found["color_shares"]["orange"] - 1 / 3) <= SHARE_TOLERANCE


def test_the_attributes_are_computed_on_a_small_sample_of_a_large_decode() -> None:
    # A 3000x2000 original arrives reduced; the attributes of a 1500x1000 copy and of a
    # 150x100 one agree (both shrunk to a sample of at most 64 pixels a side).
    image = plain(PALETTE["purple"], (1500, 1000))
    ImageDraw.Draw(image).rectangle([0, 0, 449, 999], fill=PALETTE["yellow"])  # 30%
    large = visual_attributes(image, (3000, 2000))
    small = visual_attributes(image.resize((150, 100)), (3000, 2000))
    assert large["colors"] == small["colors"] == ["purple", "yellow"]
    for found in (large, small):
        assert abs(found["color_shares"]["yellow"] - 0.3) <= SHARE_TOLERANCE
        assert (found["width"], found["height"], found["copy_space"]) == (3000, 2000, 1)
