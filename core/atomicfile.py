"""Whole-file writes that a reader (or a crash) never sees half done."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, durable: bool = False) -> None:
    """Replace `path` with `data` in one rename, so readers see the old file or the new one.

    `durable` also fsyncs the file and its folder: for state that must survive a power cut
    (the vector store's metadata), not for files that are rewritten on every start.
    """
    raw = data.encode() if isinstance(data, str) else data
    # A unique name in the same folder: the rename must not cross file systems, and two
    # writers must not share a temporary file.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        # The rename itself is durable only once the folder entry is on disk.
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
