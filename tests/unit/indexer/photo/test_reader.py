"""The indexer's reader: a photo that cannot be read is skipped with its reason, while a
storage that fails raises, so only then is the batch tried again; a good one is decoded once
into the encoder's pixels and its visual attributes."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from PIL import Image

from core.embedding.images import ImageLimits
from core.embedding.manifest import ImagePreprocessing
from core.sources import LocalSource, SourceError, SourceUnavailable
from indexer.photo.reader import Decoded, read_photo
from indexer.plan.catalog import Photo
from tests.support.images import encode, photo

SPEC = ImagePreprocessing(size=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


class FailingSource(LocalSource):
    """A folder whose one file fails as the storage says. The tests run as root, whom no
    file refuses, so the errors a worker's user meets are raised here instead."""

    def __init__(self, root: Path, failing: str, error: Exception) -> None:
        super().__init__(root)
        self.failing, self.error = failing, error

    def read(self, key: str) -> bytes:
        if key == self.failing:
            raise self.error
        return super().read(key)


def read(tmp_path: Path, error: Exception) -> tuple[Decoded | str, Decoded | str]:
    (tmp_path / "bad.jpg").write_bytes(b"x")
    (tmp_path / "good.jpg").write_bytes(encode(photo("astronaut"), "JPEG"))
    source = FailingSource(tmp_path, "bad.jpg", error)
    bad, good = (
        read_photo(source, Photo(key, key, "v"), SPEC, ImageLimits())
        for key in ("bad.jpg", "good.jpg")
    )
    return bad, good


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "cannot be read: Permission denied"),
        (IsADirectoryError(errno.EISDIR, "Is a directory"), "cannot be read: Is a directory"),
        (OSError(errno.ENAMETOOLONG, "File name too long"), "cannot be read: File name too long"),
        (SourceError("cannot read s3://b/bad.jpg: AccessDenied"), "cannot read s3://b/bad.jpg"),
    ],
)
def test_a_photo_that_cannot_be_read_gets_its_reason_and_the_rest_go_on(
    tmp_path: Path, error: Exception, reason: str
) -> None:
    bad, good = read(tmp_path, error)
    assert isinstance(bad, str) and bad.startswith(reason), bad
    assert not isinstance(good, str) and good.pixels.shape == (32, 32, 3)


def test_a_photo_is_decoded_once_into_its_pixels_and_its_attributes(tmp_path: Path) -> None:
    # A red landscape whose EXIF says "turn 90 degrees": upright it is a 300x600 portrait.
    exif = Image.Exif()
    exif[0x0112] = 6
    (tmp_path / "red.jpg").write_bytes(
        encode(Image.new("RGB", (600, 300), (220, 30, 30)), "JPEG", exif=exif)
    )
    found = read_photo(LocalSource(tmp_path), Photo("red.jpg", "red.jpg", "v"), SPEC, ImageLimits())
    assert isinstance(found, Decoded) and found.pixels.shape == (32, 32, 3)
    assert found.attributes["colors"] == ["red"] and found.attributes["copy_space"] == 1
    assert (found.attributes["width"], found.attributes["height"]) == (300, 600)
    assert found.attributes["orientation"] == "portrait"


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EIO, "Input/output error"),
        OSError(errno.ESTALE, "Stale file handle"),
        OSError(errno.EMFILE, "Too many open files"),
        SourceUnavailable("cannot read s3://b/bad.jpg: 503 SlowDown"),
    ],
)
def test_a_failing_storage_raises_so_the_batch_is_retried(tmp_path: Path, error: Exception) -> None:
    with pytest.raises(SourceUnavailable):
        read(tmp_path, error)
