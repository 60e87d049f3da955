"""Demo photographs: real photos that installed wheels ship, copied into a folder to index."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.atomicfile import write_atomic

# The manifest name the indexer looks for at a source's root (settings: indexer.metadata_files).
MANIFEST = "photos.jsonl"

# Import name -> (pip distribution, folder of the photos inside the package).
PACKAGES: dict[str, tuple[str, str]] = {
    "skimage": ("scikit-image", "data"),
    "sklearn": ("scikit-learn", "datasets/images"),
    "matplotlib": ("matplotlib", "mpl-data/sample_data"),
}

_CC0 = "CC0 1.0 (public domain dedication)"
_NO_LICENSE = "no license stated by scikit-image; see skimage.data"


@dataclass(frozen=True)
class DemoPhoto:
    """One photo of the catalogue: where a package ships it and what it shows."""

    id: str
    package: str
    source: str
    filename: str
    title: str
    tags: tuple[str, ...]
    photographer: str
    license: str

    def row(self) -> dict[str, object]:
        """Its line of photos.jsonl (indexer.plan.metadata.PhotoMetadata's fields)."""
        return {
            "path": self.filename,
            "id": self.id,
            "title": self.title,
            "tags": list(self.tags),
            "photographer": self.photographer,
            "license": self.license,
        }


def _photo(package: str, name: str, title: str, tags: str, by: str, lic: str) -> DemoPhoto:
    stem = name.rsplit(".", 1)[0].replace("_", "-").lower()
    source = f"{PACKAGES[package][1]}/{name}"
    return DemoPhoto(
        f"{package}-{stem}", package, source, name, title, tuple(tags.split()), by, lic
    )


# Synthetic or unphotographic files of skimage/data (logo, colour wheel, checkerboards, phantom,
# horse silhouette, cell phase image, 102-pixel crops, motion-blurred clock) are left out.
DEMO_PHOTOS: tuple[DemoPhoto, ...] = (
    _photo(
        "skimage", "astronaut.png", "Astronaut Eileen Collins",
        "astronaut woman portrait person spacesuit shuttle nasa flag", "NASA",
        "public domain: no known copyright restrictions (NASA Great Images)",
    ),
    _photo(
        "skimage", "camera.png", "Man filming with a camera on a tripod",
        "man person camera tripod photographer field outdoor monochrome", "Lav Varshney", _CC0,
    ),
    _photo(
        "skimage", "chelsea.png", "Chelsea the cat",
        "cat animal pet tabby indoor", "Stefan van der Walt", _CC0,
    ),
    _photo(
        "skimage", "coffee.png", "Cup of coffee on a wooden table",
        "coffee cup saucer spoon espresso drink table wood",
        "Rachel Michetti (Pikolo Espresso Bar)", _CC0,
    ),
    _photo(
        "skimage", "coins.png", "Greek coins from Pompeii",
        "coins money ancient greek museum monochrome", "Brooklyn Museum Collection",
        "no known copyright restrictions",
    ),
    _photo(
        "skimage", "moon.png", "Surface of the moon",
        "moon surface craters space astronomy monochrome", "scikit-image sample data", _NO_LICENSE,
    ),
    _photo(
        "skimage", "hubble_deep_field.jpg", "Hubble eXtreme Deep Field",
        "galaxies space stars universe astronomy hubble telescope", "NASA",
        "public domain: NASA imagery may be freely used (HubbleSite)",
    ),
    _photo(
        "skimage", "retina.jpg", "Fundus photograph of a normal left eye",
        "retina eye fundus medical vessels", "Mikael Häggström", _CC0,
    ),
    _photo(
        "skimage", "rocket.jpg", "Falcon 9 with DSCOVR on the launch pad at dusk",
        "rocket launch spacex falcon launchpad night lights tower", "SpaceX",
        "public domain (released by SpaceX)",
    ),
    *(
        _photo(
            "skimage", f"motorcycle_{side}.png", f"Red motorcycle in a garage ({side} view)",
            "motorcycle yamaha red garage vehicle indoor",
            "Middlebury 2014 stereo dataset (Scharstein et al.)",
            "no license stated by scikit-image; see the Middlebury stereo datasets",
        )
        for side in ("left", "right")
    ),
    _photo(
        "skimage", "text.png", "Handwritten equations on paper",
        "handwriting math equations paper text monochrome", "Wikipedia (File:Corner.png)",
        "public domain: no known copyright restrictions",
    ),
    _photo(
        "skimage", "page.png", "Photographed page of printed text",
        "page text document book print monochrome", "scikit-image sample data", _NO_LICENSE,
    ),
    _photo(
        "skimage", "brick.png", "Brick wall",
        "brick wall texture monochrome", "CC0Textures (Bricks25)", _CC0,
    ),
    _photo(
        "skimage", "grass.png", "Grass",
        "grass lawn texture nature plant monochrome", "linolafett (DeviantArt)", _CC0,
    ),
    _photo(
        "skimage", "gravel.png", "Gravel",
        "gravel stones pebbles ground texture monochrome", "CC0Textures (Gravel04)", _CC0,
    ),
    _photo(
        "skimage", "ihc.png", "Stained colon tissue under a microscope",
        "microscopy tissue cells medical stained", "Center for Microscopy And Molecular Imaging",
        "no known copyright restrictions",
    ),
    _photo(
        "sklearn", "china.jpg", "Tower of the Summer Palace, Beijing",
        "pagoda temple tower china beijing architecture landmark trees lake",
        "danielbuechele (Flickr)", "CC BY 2.0",
    ),
    _photo(
        "sklearn", "flower.jpg", "Orange dahlia",
        "flower dahlia orange plant garden nature closeup", "vultilion (Flickr)", "CC BY 2.0",
    ),
    _photo(
        "matplotlib", "grace_hopper.jpg", "Grace Hopper in naval uniform",
        "portrait woman person navy uniform flag scientist", "U.S. Navy",
        "no license stated by matplotlib; an official U.S. Navy portrait (public domain)",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class DemoResult:
    """What one call did: photo ids written or already there, and why others are missing."""

    target: Path
    written: tuple[str, ...]
    kept: tuple[str, ...]
    unavailable: dict[str, str]
    manifest_written: bool


class DemoPhotosUnavailable(RuntimeError):
    """No demo photo can be found: none of the packages that ship them is installed."""


def package_dir(package: str) -> Path | None:
    """The installed package's folder, found without importing it (matplotlib is slow to)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _locate(
    photo: DemoPhoto, locate: Callable[[str], Path | None], cache: dict[str, Path | None]
) -> Path | str:
    """The shipped file, or why it cannot be had."""
    if photo.package not in cache:
        cache[photo.package] = locate(photo.package)
    root = cache[photo.package]
    distribution = PACKAGES[photo.package][0]
    if root is None:
        return f"{distribution} is not installed"
    path = root / photo.source
    if not path.is_file():
        return f"{distribution} does not ship {photo.source}"
    return path


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Write atomically unless the file holds these bytes already (so its mtime stays)."""
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomic(path, data)
    return True


def write_demo_photos(
    target: Path, locate: Callable[[str], Path | None] = package_dir
) -> DemoResult:
    """Copy the available demo photos and their photos.jsonl into target, rewriting nothing equal.

    The indexer versions a file by size and mtime, so an unchanged file must keep its mtime:
    a second start then indexes nothing.
    """
    cache: dict[str, Path | None] = {}
    found: dict[str, Path] = {}
    unavailable: dict[str, str] = {}
    for photo in DEMO_PHOTOS:
        where = _locate(photo, locate, cache)
        if isinstance(where, Path):
            found[photo.id] = where
        else:
            unavailable[photo.id] = where
    if not found:
        raise DemoPhotosUnavailable(
            "no demo photos are available (scikit-image, scikit-learn and matplotlib ship them): "
            "pip install 'photosearch[demo]', or pass --photos DIR to index your own"
        )
    target.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    kept: list[str] = []
    for photo in DEMO_PHOTOS:
        if photo.id in found:
            changed = _write_if_changed(target / photo.filename, found[photo.id].read_bytes())
            (written if changed else kept).append(photo.id)
    # A photo copied before its package was uninstalled keeps its row.
    rows = [p.row() for p in DEMO_PHOTOS if (target / p.filename).is_file()]
    manifest = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    manifest_written = _write_if_changed(target / MANIFEST, manifest.encode())
    return DemoResult(target, tuple(written), tuple(kept), unavailable, manifest_written)
