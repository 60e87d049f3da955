"""CLIP's BPE tokenizer for serving: open_clip's ids without torch, BPE merges in Rust.

open_clip cleans text with ftfy and a double HTML unescape, splits it with one regex and
byte-encodes each piece before BPE. The cleaning and the split are done here exactly as it
does them; the merges run in Hugging Face `tokenizers` with the exported vocabulary.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import ftfy
import numpy as np
import regex
from tokenizers import Tokenizer

from core.embedding.arrays import TokenIds
from core.embedding.manifest import TokenizerSpec, load_manifest, tokenizer_path

SPECIAL_TOKENS = ("<start_of_text>", "<end_of_text>")
_PATTERN = regex.compile(
    "|".join(SPECIAL_TOKENS) + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE,
)


def clean_text(text: str, mode: str = "lower") -> str:
    """open_clip's text cleaning; the result is also the query-cache key."""
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    text = " ".join(text.split())
    return text.lower() if mode == "lower" else text


class ClipTokenizer:
    """Text -> token ids [sot, ..., eot], truncated to the context length as open_clip does."""

    def __init__(self, bpe: Tokenizer, spec: TokenizerSpec) -> None:
        self._bpe = bpe
        self.spec = spec

    @classmethod
    def from_repository(cls, repository: Path, version: int) -> ClipTokenizer:
        """Load version N's tokenizer from a model repository."""
        spec = load_manifest(repository, version).tokenizer
        return cls(Tokenizer.from_file(str(tokenizer_path(repository, version))), spec)

    def normalize(self, text: str) -> str:
        """The cleaned text that is tokenized (two texts with equal keys embed equally)."""
        return clean_text(text, self.spec.clean)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, with start and end tokens, at most context_length long."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of many texts (one call into the Rust BPE)."""
        words = [_PATTERN.findall(self.normalize(t)) for t in texts]
        # An empty text still needs a (possibly empty) word list for the batch call.
        encoded = self._bpe.encode_batch(
            [w or [""] for w in words], is_pretokenized=True, add_special_tokens=False
        )
        limit = self.spec.context_length
        out = []
        for w, enc in zip(words, encoded, strict=True):
            ids = [self.spec.sot_id, *(enc.ids if w else []), self.spec.eot_id]
            if len(ids) > limit:
                ids = ids[:limit]
                ids[-1] = self.spec.eot_id
            out.append(ids)
        return out


def pad_batch(ids: Sequence[Sequence[int]], multiple: int, context_length: int) -> TokenIds:
    """Zero-pad a batch to its longest row, rounded up to `multiple` (so requests share shapes).

    Zeros after the end-of-text token cannot change CLIP's causal text encoder's output.
    """
    longest = max(len(row) for row in ids)
    length = min(context_length, -(-longest // multiple) * multiple)
    batch = np.zeros((len(ids), length), dtype=np.int64)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = row
    return batch
