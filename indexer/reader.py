"""Read a batch's files and decode them on the reader threads; a bad photo gets its reason."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor

from core.embedding.arrays import Pixels
from core.embedding.errors import InvalidImage
from core.embedding.images import ImageLimits, prepare_image
from core.embedding.manifest import ImagePreprocessing
from core.sources import Source, SourceRefused
from indexer.catalog import Photo


def read_photo(
    source: Source, photo: Photo, spec: ImagePreprocessing, limits: ImageLimits
) -> Pixels | str:
    """The encoder's pixels, or why the photo cannot be indexed (I/O failures raise: retry)."""
    try:
        data = source.read(photo.key)
    except FileNotFoundError:
        return "gone from the source before it could be read"
    except SourceRefused as exc:  # a link, a FIFO, a folder, too large: final, not retried
        return str(exc)
    try:
        return prepare_image(data, spec, limits)
    except InvalidImage as exc:
        return str(exc)


def read_batch(
    executor: Executor,
    source: Source,
    photos: Sequence[Photo],
    spec: ImagePreprocessing,
    limits: ImageLimits,
) -> list[Pixels | str]:
    """All photos of a batch at once: reading (network) and decoding overlap across threads."""
    return list(executor.map(lambda p: read_photo(source, p, spec, limits), photos))
