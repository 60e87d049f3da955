"""Read a batch's files and decode them on the reader threads; a bad photo gets its reason."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from core.embedding.arrays import Pixels
from core.embedding.errors import InvalidImage
from core.embedding.images import ImageLimits, Reserve, prepare_photo
from core.embedding.manifest import ImagePreprocessing
from core.payload import PhotoPayload
from core.sources import Source, SourceError, SourceRefused, SourceUnavailable
from indexer.plan.catalog import Photo

# The storage itself failing (a mount gone, a network filesystem or socket timing out, this
# process out of descriptors or memory): the batch is tried again later. Any other OSError
# (permission denied, a folder, a name too long...) is the one photo's, recorded as its reason.
STORAGE_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.ESTALE,
        errno.ENOTCONN,
        errno.ETIMEDOUT,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.ENOBUFS,
        errno.EAGAIN,
        errno.EINTR,
    }
)


# Deleted between its listing and its read: a delete, not a problem of the photo.
GONE = "gone from the source before it could be read"


@dataclass(frozen=True)
class Decoded:
    """A photo decoded once: the encoder's pixels, and the visual attributes of its payload
    (core/embedding/attributes.py)."""

    pixels: Pixels
    attributes: PhotoPayload


def read_photo(
    source: Source,
    photo: Photo,
    spec: ImagePreprocessing,
    limits: ImageLimits,
    reserve: Reserve | None = None,
) -> Decoded | str:
    """The encoder's pixels and the photo's visual attributes from one decode, or why the
    photo cannot be indexed; a source or storage that does not answer raises
    SourceUnavailable (the batch is tried again). The decode holds its estimated memory
    through `reserve` (the worker's MemoryBudget): one needing more than the whole budget is
    refused as too large, its reason recorded."""
    try:
        data = source.read(photo.key)
    except FileNotFoundError:
        return GONE
    except SourceRefused as exc:  # a link, a FIFO, a folder, too large: final, not retried
        return str(exc)
    except SourceUnavailable:
        raise
    except SourceError as exc:  # refused for this one object (an S3 403): final
        return str(exc)
    except OSError as exc:
        if exc.errno in STORAGE_ERRNOS:
            raise SourceUnavailable(f"reading {photo.key}: {exc}") from exc
        return f"cannot be read: {exc.strerror or exc}"
    try:
        return Decoded(*prepare_photo(data, spec, limits, reserve))
    except InvalidImage as exc:
        return str(exc)


def read_batch(
    executor: Executor,
    source: Source,
    photos: Sequence[Photo],
    spec: ImagePreprocessing,
    limits: ImageLimits,
    reserve: Reserve | None = None,
) -> list[Decoded | str]:
    """All photos of a batch at once: reading (network) and decoding overlap across threads,
    the decodes within the memory `reserve` gives."""
    return list(executor.map(lambda p: read_photo(source, p, spec, limits, reserve), photos))
