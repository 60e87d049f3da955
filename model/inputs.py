"""What the tiny model is fed, alike in training (model/train.py) and in its held-back figures
(model/heldback.py): a synthetic photo's pixels as the indexer resizes them, and the token ids
of a batch of texts. Part of the trainer's recipe: its cache key digests this file too."""

from __future__ import annotations

from typing import Any

import numpy as np

from model import synthetic


def model_pixels(photo: synthetic.SyntheticPhoto, size: int, image: Any) -> Any:
    """The photo's file-size picture resized as the indexer resizes it (bicubic), uint8 HWC."""
    picture = synthetic.image_of(photo).resize((size, size), image.Resampling.BICUBIC)
    return np.asarray(picture, dtype=np.uint8)


def tokenize(tokenizer: Any, texts: list[str], cache: dict[str, Any]) -> Any:
    """Token ids cut to the batch's longest text: the causal tower never sees past it."""
    import torch

    missing = [t for t in dict.fromkeys(texts) if t not in cache]
    if missing:
        for text, row in zip(missing, tokenizer(missing), strict=True):
            cache[text] = row
    ids = torch.stack([cache[t] for t in texts])
    length = int((ids != 0).sum(1).max())
    return ids[:, :length]
