"""What the tiny model is fed: a synthetic photo at the model's size, a batch's token ids."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from model.inputs import model_pixels, tokenize
from model.synthetic import generate


def test_a_photo_is_fed_as_uint8_pixels_at_the_model_size() -> None:
    pixels = model_pixels(generate(1, 0)[0], 32, Image)
    assert pixels.dtype == np.uint8 and pixels.shape == (32, 32, 3)


def test_token_ids_are_cut_to_the_longest_text_and_each_text_tokenized_once() -> None:
    asked: list[list[str]] = []

    def tokenizer(texts: list[str]) -> Any:
        asked.append(texts)
        # Padded to a context of 6, as open_clip's tokenizers pad to theirs.
        rows = [[1, *range(2, 2 + len(t.split()))] for t in texts]
        return [torch.tensor(row + [0] * (6 - len(row))) for row in rows]

    cache: dict[str, Any] = {}
    ids = tokenize(tokenizer, ["a b", "a b c", "a b"], cache)
    assert ids.tolist() == [[1, 2, 3, 0], [1, 2, 3, 4], [1, 2, 3, 0]]
    tokenize(tokenizer, ["a b", "d"], cache)
    assert asked == [["a b", "a b c"], ["d"]]
