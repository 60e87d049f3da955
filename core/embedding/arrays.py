"""Names for the arrays that cross the embedding boundary."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Embeddings = npt.NDArray[np.float32]  # [N, D], L2-normalized rows
Pixels = npt.NDArray[np.uint8]  # [S, S, 3] or [N, S, S, 3], RGB
TokenIds = npt.NDArray[np.int64]  # [N, L], zero-padded
AnyArray = npt.NDArray[Any]


def row_cosines(a: AnyArray, b: AnyArray) -> AnyArray:
    """The cosine of each row of `a` with the same row of `b` (neither need be normalized)."""
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)  # type: ignore[no-any-return]
