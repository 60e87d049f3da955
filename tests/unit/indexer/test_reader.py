"""The indexer's reader: a photo that cannot be read is skipped with its reason, while a
storage that fails raises, so only then is the batch tried again."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from core.embedding.arrays import Pixels
from core.embedding.images import ImageLimits
from core.embedding.manifest import ImagePreprocessing
from core.sources import LocalSource, SourceError, SourceUnavailable
from indexer.catalog import Photo
from indexer.reader import read_photo
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


def read(tmp_path: Path, error: Exception) -> tuple[Pixels | str, Pixels | str]:
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
    assert not isinstance(good, str) and good.shape == (32, 32, 3)


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
