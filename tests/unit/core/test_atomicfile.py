"""write_atomic: a reader sees the old file or the new one, never a part, and a failed write
leaves the old file and no temporary behind."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core.atomicfile import write_atomic


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    versions = [(str(i) * 200_000).encode() for i in range(10)]
    write_atomic(path, versions[0])
    stop = threading.Event()
    seen: set[bytes] = set()

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(20):
        for data in versions:
            write_atomic(path, data, durable=False)
    stop.set()
    reader.join()
    assert seen and seen <= set(versions)
    assert list(tmp_path.iterdir()) == [path]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "aliases.json"
    write_atomic(path, '{"live": "photos_v1"}', durable=True)

    def no_space(*args: object) -> None:
        raise OSError(28, "No space left on device")

    # The file system fails after the new bytes are written, before the rename.
    monkeypatch.setattr("core.atomicfile.os.replace", no_space)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, '{"live": "photos_v2"}', durable=True)
    assert path.read_text() == '{"live": "photos_v1"}'
    assert list(tmp_path.iterdir()) == [path]
