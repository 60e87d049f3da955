"""The exportable encoders wrapped around an open_clip model (imports torch: exporter only)."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.embedding.manifest import TokenizerSpec


class ImageEncoder(nn.Module):
    """uint8 NHWC pixels in, L2-normalized embeddings out; CLIP's normalization inside the graph.

    uint8 on the wire is a quarter of float32's bytes, and NHWC is what Pillow hands the client,
    so the client never transposes or scales.
    """

    def __init__(self, clip: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.clip = clip
        # (x/255 - mean)/std == (x - 255*mean)/(255*std): one subtract and one divide.
        self.mean255: torch.Tensor
        self.std255: torch.Tensor
        self.register_buffer("mean255", torch.tensor(mean).view(1, 3, 1, 1) * 255.0)
        self.register_buffer("std255", torch.tensor(std).view(1, 3, 1, 1) * 255.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).to(torch.float32)
        x = (x - self.mean255) / self.std255
        features = self.clip.encode_image(x)  # type: ignore[operator]
        return F.normalize(features, dim=-1)


class TextEncoder(nn.Module):
    """Token ids [batch, length] in, L2-normalized embeddings out, for any length up to the context.

    open_clip adds the full 77-row positional table and mask, which fixes the length. CLIP's text
    transformer is causal and pools the end-of-text token, so tokens after it cannot change the
    result: slicing the table and the mask to the batch's length gives the same embedding for
    far less work on short queries.
    """

    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        tower: Any = getattr(clip, "text", clip)  # CustomTextCLIP keeps its tower in .text
        for part in ("token_embedding", "positional_embedding", "transformer", "ln_final"):
            if not hasattr(tower, part):
                raise ValueError(
                    f"text tower {type(tower).__name__} has no {part}: only open_clip's own "
                    "causal text transformer can be exported with a dynamic length"
                )
        if getattr(tower, "cls_emb", None) is not None or getattr(tower, "use_pad_mask", False):
            raise ValueError("text towers with a class token or a padding mask are not supported")
        if getattr(tower, "attn_mask", None) is None:
            # Bidirectional (no_causal_mask, SigLIP): every position sees the padding.
            raise ValueError("the text tower is not causal")
        self.pool_type: str = getattr(
            tower, "text_pool_type", getattr(tower, "pool_type", "argmax")
        )
        if self.pool_type not in ("argmax", "eos"):
            raise ValueError(f"text pooling {self.pool_type!r} is not supported")
        eos_id = getattr(tower, "text_eos_id", getattr(tower, "eos_id", None))
        if self.pool_type == "eos" and eos_id is None:
            raise ValueError("text pooling 'eos' needs the tokenizer's end-of-text id")
        self.eos_id: int = -1 if eos_id is None else int(eos_id)
        self.token_embedding = tower.token_embedding
        self.positional_embedding = tower.positional_embedding
        self.transformer = tower.transformer
        self.ln_final = tower.ln_final
        self.text_projection = tower.text_projection
        self.attn_mask: torch.Tensor | None
        self.register_buffer("attn_mask", tower.attn_mask, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        x = self.token_embedding(input_ids)
        x = x + self.positional_embedding[:length]
        mask = self.attn_mask[:length, :length] if self.attn_mask is not None else None
        x = self.transformer(x, attn_mask=mask)
        x = self.ln_final(x)
        rows = torch.arange(x.shape[0], device=x.device)
        if self.pool_type == "argmax":
            # The end-of-text token has the highest id in CLIP's vocabulary.
            pooled = x[rows, input_ids.argmax(dim=-1)]
        else:
            pooled = x[rows, torch.eq(input_ids, self.eos_id).to(torch.int32).argmax(dim=-1)]
        if isinstance(self.text_projection, nn.Linear):
            pooled = self.text_projection(pooled)
        elif self.text_projection is not None:
            pooled = pooled @ self.text_projection
        return F.normalize(pooled, dim=-1)


class FixedLengthTextEncoder(nn.Module):
    """Token ids [batch, context_length] in, L2-normalized embeddings out: open_clip's own
    encode_text over the whole context, for towers where padding changes the result
    (bidirectional attention, pooling at the last position, attention masks of pad ids)."""

    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        self.clip = clip

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.clip.encode_text(input_ids), dim=-1)  # type: ignore[operator]


def text_encoder_for(
    clip: nn.Module, spec: TokenizerSpec
) -> tuple[nn.Module, Literal["dynamic", "fixed"]]:
    """The dynamic-length encoder where it embeds exactly as open_clip does at full length,
    else the fixed-length one. Dynamic needs a causal tower pooled at a token and padding
    that is trailing zeros (what the client and the python backend add): then the positions
    a batch cuts off can change nothing before them."""
    try:
        encoder = TextEncoder(clip)
    except ValueError:
        return FixedLengthTextEncoder(clip), "fixed"
    # 'eos' pooling finds the first eos id: a zero eos would find padding that is not there.
    zero_eos = encoder.pool_type == "eos" and encoder.eos_id == 0
    if spec.pad_id != 0 or spec.padding_side != "right" or zero_eos:
        return FixedLengthTextEncoder(clip), "fixed"
    return encoder, "dynamic"
