"""The memory a decode really allocates, measured without the process's RSS: the pixels of
every Pillow image alive at each moment (Pillow allocates them with malloc, which tracemalloc
does not see), plus what tracemalloc sees (numpy's copies, the bytes of `np.asarray`).

Each image's pixels are counted from when its `im` is set (Pillow's one setter: every new
image, every decode's buffer) until the image is collected. An image that shares another's
pixels (`Image.fromarray` over a numpy array) is counted twice, and the two peaks are added
though they may come at different moments: the figure can only be too high, never too low,
which is the side a test of a reservation must err on.
"""

from __future__ import annotations

import tracemalloc
import weakref
from types import TracebackType
from typing import Any

from PIL import Image

# Bytes Pillow stores per pixel (Storage.c), written out here rather than taken from the
# code under test.
_ONE = ("1", "L", "P")
_TWO = ("I;16", "I;16B", "I;16L", "I;16N", "BGR;15", "BGR;16")


def pixel_bytes(core: Any) -> int:
    """Bytes of one ImagingCore's pixels."""
    width, height = core.size
    mode = str(core.mode)
    return int(width * height * (1 if mode in _ONE else 2 if mode in _TWO else 4))


class PixelLedger:
    """Within `with`: `peak` is the most bytes Pillow's images and Python's allocations held."""

    def __init__(self) -> None:
        self.held: dict[int, int] = {}
        self.current = 0
        self.pillow_peak = 0
        self.python_peak = 0
        self._property: property | None = None

    @property
    def peak(self) -> int:
        return self.pillow_peak + self.python_peak

    def _set(self, image: Image.Image, core: Any) -> None:
        key = id(image)
        if key not in self.held:
            self.held[key] = 0
            weakref.finalize(image, self._drop, key)
        size = pixel_bytes(core) if core is not None else 0
        self.current += size - self.held[key]
        self.held[key] = size
        self.pillow_peak = max(self.pillow_peak, self.current)

    def _drop(self, key: int) -> None:
        self.current -= self.held.pop(key, 0)

    def __enter__(self) -> PixelLedger:
        original: property = Image.Image.__dict__["im"]
        self._property = original
        assert original.fget is not None and original.fset is not None
        setter = original.fset

        def set_im(image: Image.Image, core: Any) -> None:
            self._set(image, core)
            setter(image, core)

        Image.Image.im = property(original.fget, set_im)  # type: ignore[method-assign,assignment]
        tracemalloc.start()
        tracemalloc.reset_peak()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.python_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        Image.Image.im = self._property  # type: ignore[method-assign,assignment]
