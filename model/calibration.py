"""The calibration sample a reduced-precision export is measured on: photos, their altered
copies, and queries.

The photos are the demo photos (real photographs that installed wheels ship) or a folder of
the user's own. Each photo also comes as three altered copies (a crop, a JPEG at quality 40,
a mirror image): a variant that still finds a copy's original first keeps near-duplicate
search working, whatever its cosine says.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from core.demo import DEMO_PHOTOS, PACKAGES, package_dir
from core.embedding.arrays import AnyArray
from core.embedding.errors import InvalidImage
from core.embedding.images import decode_image, resize_and_crop
from core.embedding.manifest import ImagePreprocessing

# Typical stock-photo searches: objects, scenes, people, moods, styles.
QUERIES = (
    "a red bicycle against a brick wall",
    "cat sleeping on a windowsill",
    "sunset over the ocean",
    "mountain lake reflection at dawn",
    "business people shaking hands",
    "close-up of coffee beans",
    "new york city skyline at night",
    "golden retriever puppy in the snow",
    "aerial view of a forest",
    "woman running on the beach",
    "vintage car on an empty road",
    "fresh vegetables at a farmers market",
    "child blowing bubbles",
    "rainy street in tokyo",
    "astronaut floating in space",
    "old man reading a newspaper",
    "laptop on a wooden desk",
    "hot air balloons at sunrise",
    "macro shot of a bee on a flower",
    "northern lights over snowy mountains",
    "a cup of coffee on a table",
    "portrait of a woman in uniform",
    "photographer with a camera on a tripod",
    "grains of rice",
    "a rocket launch",
    "flowers in a vase",
    "a brick building in the city",
    "black and white photo of a man",
    "a galaxy in the night sky",
    "a cat looking at the camera",
    "satellite image of a coastline",
    "a hand holding a smartphone",
    "students in a classroom",
    "doctor talking to a patient",
    "a family having dinner",
    "snowy forest path",
    "colourful street art",
    "a plate of pasta",
    "a dog catching a frisbee",
    "an empty office at night",
    "a wind turbine on a hill",
    "a bowl of fruit",
    "a chessboard",
    "a woman smiling outdoors",
    "a train at a station",
    "an abstract blue background",
    "waves crashing on rocks",
    "a bridge over a river",
)
# Enough photos for top-10 retrieval to mean something, few enough to embed in seconds.
MAX_PHOTOS = 64
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif")


class CalibrationUnavailable(RuntimeError):
    """No photos to calibrate on; the message says where to get some."""


def _crop(image: Image.Image) -> Image.Image:
    """The middle 80%: what a cropped re-upload keeps."""
    width, height = image.size
    dx, dy = width // 10, height // 10
    return image.crop((dx, dy, width - dx, height - dy))


def _jpeg40(image: Image.Image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=40)
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


def _flip(image: Image.Image) -> Image.Image:
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


ALTERATIONS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "crop": _crop,
    "jpeg40": _jpeg40,
    "flip": _flip,
}


@dataclass(frozen=True)
class Calibration:
    """Pixels of the photos, then of their copies; copy_of[i] is copy i's photo's row."""

    photos: AnyArray  # uint8 [P, S, S, 3]
    copies: AnyArray  # uint8 [P * len(ALTERATIONS), S, S, 3]
    copy_of: AnyArray  # int [P * len(ALTERATIONS)]
    queries: tuple[str, ...]
    source: str

    @property
    def images(self) -> AnyArray:
        """Photos and copies in one array: the sample the cosines are taken over."""
        return np.concatenate([self.photos, self.copies])


def photo_files(folder: Path | None) -> tuple[list[Path], str]:
    """Up to MAX_PHOTOS image files of `folder`, else the installed demo photos."""
    if folder is not None:
        if not folder.is_dir():
            raise CalibrationUnavailable(f"calibration folder {folder} does not exist")
        files = sorted(
            p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
        )
        if not files:
            raise CalibrationUnavailable(
                f"no image files ({', '.join(IMAGE_SUFFIXES)}) in {folder}"
            )
        return files[:MAX_PHOTOS], str(folder)
    roots = {package: package_dir(package) for package in PACKAGES}
    files = [
        root / photo.source
        for photo in DEMO_PHOTOS
        if (root := roots[photo.package]) is not None and (root / photo.source).is_file()
    ]
    if not files:
        raise CalibrationUnavailable(
            "no calibration photos: pass --calibration-photos DIR, or install the demo photos "
            "(pip install 'photosearch[demo]')"
        )
    return files[:MAX_PHOTOS], "demo photos"


def load_calibration(spec: ImagePreprocessing, files: list[Path], source: str) -> Calibration:
    """The sample at the model's input size, from photo_files()' answer: the photos
    (unreadable files skipped) and their copies."""
    photos: list[AnyArray] = []
    copies: list[AnyArray] = []
    copy_of: list[int] = []
    for path in files:
        try:
            image = decode_image(path.read_bytes(), spec.size)
        except (InvalidImage, OSError):
            continue
        row = len(photos)
        photos.append(resize_and_crop(image, spec))
        for alter in ALTERATIONS.values():
            copies.append(resize_and_crop(alter(image), spec))
            copy_of.append(row)
    if len(photos) < 2:
        raise CalibrationUnavailable(f"fewer than 2 readable photos in {source}")
    return Calibration(np.stack(photos), np.stack(copies), np.array(copy_of), QUERIES, source)
