"""The exported encoders embed as open_clip does: the image one from uint8 pixels, the text
one at any length up to the end-of-text token; padding that would change the result gets the
fixed-length encoder instead. On the tiny test architecture, in PyTorch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from core.embedding.manifest import TokenizerSpec
from model.encoders import FixedLengthTextEncoder, ImageEncoder, TextEncoder, text_encoder_for
from tests.support.models import tiny_clip

MEAN, STD = (0.48, 0.46, 0.41), (0.27, 0.26, 0.28)


@pytest.fixture(scope="module")
def clip() -> Any:
    return tiny_clip(seed=3)


def test_the_image_encoder_normalizes_uint8_pixels_inside_the_graph(clip: Any) -> None:
    size = clip.visual.image_size
    size = size[0] if isinstance(size, tuple | list) else size
    pixels = torch.randint(0, 256, (2, size, size, 3), dtype=torch.uint8)
    scaled = pixels.permute(0, 3, 1, 2).float() / 255
    normalized = (scaled - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = F.normalize(clip.encode_image(normalized), dim=-1)
        got = ImageEncoder(clip, MEAN, STD)(pixels)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_the_text_encoder_cut_to_the_longest_query_embeds_as_at_full_length(clip: Any) -> None:
    context = clip.context_length
    eot = clip.vocab_size - 1
    short = torch.tensor([[eot - 7, 5, 9, eot, 0, 0]])
    full = torch.zeros((1, context), dtype=torch.long)
    full[0, : short.shape[1]] = short
    encoder = TextEncoder(clip)
    with torch.no_grad():
        expected = F.normalize(clip.encode_text(full), dim=-1)
        torch.testing.assert_close(encoder(short), expected, atol=1e-5, rtol=1e-5)


def test_padding_other_than_trailing_zeros_takes_the_fixed_length_encoder(clip: Any) -> None:
    dynamic, kind = text_encoder_for(clip, TokenizerSpec(context_length=clip.context_length))
    assert (type(dynamic), kind) == (TextEncoder, "dynamic")
    left = TokenizerSpec(context_length=clip.context_length, padding_side="left")
    fixed, kind = text_encoder_for(clip, left)
    assert (type(fixed), kind) == (FixedLengthTextEncoder, "fixed")
