"""Client-side image preprocessing: open_clip's transform, every pixel mode, clear refusals."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from PIL import Image

from core.embedding.arrays import AnyArray
from core.embedding.errors import ImageTooLarge, InvalidImage
from core.embedding.images import (
    ImageLimits,
    decode_image,
    decoded_bytes,
    prepare_image,
    to_rgb,
)
from core.embedding.manifest import ImagePreprocessing
from model.onnx_export import import_open_clip
from tests.support.images import broken_files, encode, photo, png_header_only

SPEC = ImagePreprocessing(
    size=224,
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
)


def _open_clip_pixels(data: bytes) -> AnyArray:
    """open_clip's own eval transform, back in 0..255 HWC for comparison."""
    transform = import_open_clip().image_transform(SPEC.size, is_train=False)
    tensor = transform(Image.open(io.BytesIO(data))).numpy()
    mean, std = np.array(SPEC.mean)[:, None, None], np.array(SPEC.std)[:, None, None]
    return (tensor * std + mean).transpose(1, 2, 0) * 255.0  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["astronaut", "chelsea", "coffee", "rocket"])
def test_lossless_images_match_open_clip_exactly(name: str) -> None:
    data = encode(photo(name).resize((900, 600)), "PNG")
    ours = prepare_image(data, SPEC)
    assert ours.shape == (224, 224, 3) and ours.dtype == np.uint8
    assert np.abs(ours - _open_clip_pixels(data)).max() < 0.01


@pytest.mark.parametrize("name", ["astronaut", "chelsea", "coffee"])
def test_draft_decoded_jpegs_stay_within_a_grey_level_of_open_clip(name: str) -> None:
    data = encode(photo(name).resize((4000, 3000)), quality=92)
    diff = np.abs(prepare_image(data, SPEC) - _open_clip_pixels(data))
    assert diff.mean() <= 1.0
    assert np.percentile(diff, 99) <= 6.0


def test_a_12_megapixel_jpeg_is_not_decoded_at_full_size() -> None:
    data = encode(photo("astronaut").resize((4000, 3000)), quality=90)
    decoded = decode_image(data, min_size=224)
    # Draft mode picks the largest DCT reduction (1/8) that keeps the short side >= 224.
    assert decoded.size == (500, 375)


def test_exif_orientation_is_applied() -> None:
    image = photo("chelsea").resize((300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: rotate 90 degrees clockwise to view
    decoded = decode_image(encode(image, quality=95, exif=exif), min_size=200)
    assert decoded.size == (200, 300)
    expected = np.asarray(image.transpose(Image.Transpose.ROTATE_270), dtype=np.float64)
    assert np.abs(np.asarray(decoded, dtype=np.float64) - expected).mean() < 4.0


def test_every_pixel_mode_becomes_rgb() -> None:
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 0))  # fully transparent
    assert to_rgb(rgba).getpixel((0, 0)) == (255, 255, 255)
    half = Image.new("RGBA", (4, 4), (0, 0, 0, 128))
    assert to_rgb(half).getpixel((0, 0)) == (127, 127, 127)
    assert to_rgb(Image.new("L", (4, 4), 200)).getpixel((0, 0)) == (200, 200, 200)
    assert to_rgb(Image.new("LA", (4, 4), (0, 0))).getpixel((0, 0)) == (255, 255, 255)
    assert to_rgb(Image.new("1", (4, 4), 1)).getpixel((0, 0)) == (255, 255, 255)
    assert to_rgb(Image.new("CMYK", (4, 4), (0, 255, 255, 0))).getpixel((0, 0)) == (255, 0, 0)
    sixteen = Image.fromarray(np.full((4, 4), 65535, dtype=np.uint16))
    assert sixteen.mode.startswith("I;16")
    assert to_rgb(sixteen).getpixel((0, 0)) == (255, 255, 255)
    mid = Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16))
    assert to_rgb(mid).getpixel((0, 0)) == (128, 128, 128)
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 0, 255, 0] + [0] * 762)
    palette.info["transparency"] = 0
    assert to_rgb(palette).getpixel((0, 0)) == (0, 255, 0)


@pytest.mark.parametrize(
    ("fmt", "mode"),
    [
        ("PNG", "I;16"),
        ("PNG", "LA"),
        ("TIFF", "CMYK"),
        ("WEBP", "RGBA"),
        ("GIF", "P"),
        ("JPEG", "CMYK"),
        ("JPEG", "L"),
    ],
)
def test_files_of_each_format_and_mode_decode(fmt: str, mode: str) -> None:
    base = photo("coffee").resize((120, 80))
    image = (
        Image.fromarray(np.asarray(base.convert("L"), dtype=np.uint16) * 257)
        if mode == "I;16"
        else base.convert(mode)
    )
    pixels = prepare_image(encode(image, fmt), SPEC)
    assert pixels.shape == (224, 224, 3)
    assert 30 < pixels.mean() < 225  # a real picture, not a blank


def test_animated_gif_uses_its_first_frame() -> None:
    frames = [Image.new("RGB", (64, 64), c) for c in ((255, 0, 0), (0, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    pixels = prepare_image(data, SPEC)
    assert tuple(pixels[112, 112]) == (255, 0, 0)


@pytest.mark.parametrize("case", sorted(broken_files()))
def test_broken_files_are_refused_with_a_reason(case: str) -> None:
    with pytest.raises(InvalidImage) as info:
        prepare_image(broken_files()[case], SPEC)
    assert str(info.value)


def test_pixel_and_byte_limits_refuse_bombs_before_decoding() -> None:
    with pytest.raises(ImageTooLarge, match=r"(30000x30000|900000000 pixels)"):
        prepare_image(png_header_only(30000, 30000), SPEC)
    with pytest.raises(ImageTooLarge, match="limit"):
        prepare_image(png_header_only(100_000, 100_000), SPEC)  # past Pillow's own bomb limit too
    small = ImageLimits(max_pixels=10_000, max_bytes=1_000)
    with pytest.raises(ImageTooLarge, match="bytes"):
        prepare_image(encode(photo(), quality=90), SPEC, small)


def test_large_lossless_images_are_shrunk_first_and_still_match_open_clip() -> None:
    # 2688x1792: shrunk by 4 right after decoding (shorter side 448, twice the 224 the resize
    # needs), then resized as open_clip does from full size.
    data = encode(photo("astronaut").resize((2688, 1792)), "PNG")
    diff = np.abs(prepare_image(data, SPEC) - _open_clip_pixels(data))
    assert diff.mean() < 1.0


def test_a_shrunk_decode_still_turns_upright() -> None:
    image = photo("chelsea").resize((1800, 1200))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to show
    out = io.BytesIO()
    image.save(out, "PNG", exif=exif)
    decoded = decode_image(out.getvalue(), min_size=224)
    assert decoded.size == (600, 900)  # shrunk by 2, then turned
    expected = image.transpose(Image.Transpose.ROTATE_270).reduce(2)
    assert np.abs(np.asarray(decoded, np.int16) - np.asarray(expected, np.int16)).mean() < 1.0


def test_sixteen_bit_grey_converts_in_integers_and_reserves_its_peak() -> None:
    grey = np.tile(np.arange(0, 65536, 16, dtype=np.uint16), (64, 1))  # 4096 wide, 64 high
    data = encode(Image.fromarray(grey), "PNG")
    asked: list[int] = []

    @contextmanager
    def reserve(amount: int) -> Iterator[None]:
        asked.append(amount)
        yield

    decoded = decode_image(data, min_size=16, reserve=reserve)
    assert decoded.mode == "RGB"
    # shrunk by 2 (64 // (2 * 16)): the top byte of each 16-bit value, averaged in pairs
    assert decoded.size == (2048, 32)
    assert decoded.getpixel((0, 0)) == (0, 0, 0)
    assert decoded.getpixel((2047, 0)) == (255, 255, 255)
    # held once: the 16-bit pixels, their 8-bit copy and the shrunk copies
    assert asked == [decoded_bytes((4096, 64), "I;16", 16)]
    assert asked[0] >= 4096 * 64 * 3
