"""Query text -> token ids for serving: open_clip's ids without torch or transformers.

Two kinds, as the manifest's TokenizerSpec says. CLIP's BPE: open_clip cleans text with ftfy
and a double HTML unescape, splits it with one regex and byte-encodes each piece before BPE;
the cleaning and the split are done here exactly as it does them, the merges run in Hugging
Face `tokenizers` with the exported vocabulary. A Hugging Face tokenizer (open_clip's
HFTokenizer: SigLIP, XLM-R, NLLB): the exported tokenizer.json carries its normalizer,
pre-tokenizer and post-processor; open_clip's cleaning, truncation, padding and
strip_sep_token are reproduced here from the spec.
"""

from __future__ import annotations

import html
import string
from abc import ABC, abstractmethod
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
# open_clip's canonicalize (from big_vision) drops ASCII punctuation only.
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def clean_text(text: str, mode: str = "lower") -> str:
    """open_clip's text cleaning (its get_clean_fn); the result is also the query-cache key."""
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    if mode == "canonicalize":
        text = text.replace("_", " ").translate(_PUNCTUATION).lower()
    text = " ".join(text.split())
    return text.lower() if mode == "lower" else text


class TextTokenizer(ABC):
    """Text -> the token ids one model version takes, as open_clip's tokenizer gives them."""

    def __init__(self, spec: TokenizerSpec) -> None:
        self.spec = spec

    def normalize(self, text: str) -> str:
        """The cleaned text that is tokenized (two texts with equal keys embed equally)."""
        return clean_text(text, self.spec.clean)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, special tokens included, at most context_length long."""
        return self.encode_batch([text])[0]

    @abstractmethod
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of many texts (one call into the Rust tokenizer)."""


class ClipTokenizer(TextTokenizer):
    """CLIP's BPE: [sot, ..., eot], truncated to the context length as open_clip does."""

    def __init__(self, bpe: Tokenizer, spec: TokenizerSpec) -> None:
        super().__init__(spec)
        if spec.kind != "clip_bpe" or spec.sot_id is None or spec.eot_id is None:
            raise ValueError(f"not a CLIP BPE tokenizer spec: {spec}")
        self._bpe = bpe
        self._sot, self._eot = spec.sot_id, spec.eot_id

    @classmethod
    def from_repository(cls, repository: Path, version: int) -> ClipTokenizer:
        """Load version N's tokenizer from a model repository (a CLIP BPE one)."""
        spec = load_manifest(repository, version).tokenizer
        return cls(Tokenizer.from_file(str(tokenizer_path(repository, version))), spec)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        words = [_PATTERN.findall(self.normalize(t)) for t in texts]
        # An empty text still needs a (possibly empty) word list for the batch call.
        encoded = self._bpe.encode_batch(
            [w or [""] for w in words], is_pretokenized=True, add_special_tokens=False
        )
        limit = self.spec.context_length
        out = []
        for w, enc in zip(words, encoded, strict=True):
            ids = [self._sot, *(enc.ids if w else []), self._eot]
            if len(ids) > limit:
                ids = ids[:limit]
                ids[-1] = self._eot
            out.append(ids)
        return out


class HuggingFaceTokenizer(TextTokenizer):
    """open_clip's HFTokenizer: clean, then the tokenizer.json's own pipeline with truncation
    to the context; padded to it when the model takes a fixed length; sep ids stripped."""

    def __init__(self, tokenizer: Tokenizer, spec: TokenizerSpec) -> None:
        super().__init__(spec)
        if spec.kind != "huggingface":
            raise ValueError(f"not a Hugging Face tokenizer spec: {spec}")
        # As transformers sets it for `max_length=..., truncation=True`: the post-processor's
        # special tokens are counted in the length and kept; whatever the file says is replaced.
        tokenizer.enable_truncation(
            spec.context_length, strategy="longest_first", direction=spec.truncation_side
        )
        tokenizer.no_padding()
        tokenizer.encode_special_tokens = spec.split_special_tokens
        self._tokenizer = tokenizer

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encoded = self._tokenizer.encode_batch(
            [self.normalize(t) for t in texts], add_special_tokens=True
        )
        spec = self.spec
        out = []
        for enc in encoded:
            ids = list(enc.ids)
            if spec.strip_sep_id is not None:
                ids = [0 if i == spec.strip_sep_id else i for i in ids]
            if spec.padding == "fixed":
                pads = [spec.pad_id] * (spec.context_length - len(ids))
                ids = pads + ids if spec.padding_side == "left" else ids + pads
            out.append(ids)
        return out


def load_tokenizer(repository: Path, version: int) -> TextTokenizer:
    """Version N's serving tokenizer, of the kind its manifest names."""
    spec = load_manifest(repository, version).tokenizer
    file = Tokenizer.from_file(str(tokenizer_path(repository, version)))
    if spec.kind == "huggingface":
        return HuggingFaceTokenizer(file, spec)
    return ClipTokenizer(file, spec)


def pad_batch(
    ids: Sequence[Sequence[int]],
    multiple: int,
    context_length: int,
    *,
    pad_id: int = 0,
    fixed: bool = False,
) -> TokenIds:
    """Pad a batch with `pad_id` on the right: to its longest row rounded up to `multiple` (so
    requests share shapes), or, `fixed`, to exactly the context length.

    Ids after the end-of-text token cannot change a causal text encoder's output, which is
    what makes the short form valid; a bidirectional one (SigLIP) sees every position, so it
    takes the whole context, padded as open_clip pads it.
    """
    longest = max(len(row) for row in ids)
    if longest > context_length:
        raise ValueError(f"{longest} token ids exceed the context length {context_length}")
    length = context_length if fixed else min(context_length, -(-longest // multiple) * multiple)
    batch = np.full((len(ids), length), pad_id, dtype=np.int64)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = row
    return batch


def pad_for(spec: TokenizerSpec, ids: Sequence[Sequence[int]], multiple: int) -> TokenIds:
    """pad_batch as the model version of `spec` takes its ids."""
    fixed = spec.padding == "fixed"
    return pad_batch(ids, multiple, spec.context_length, pad_id=spec.pad_id, fixed=fixed)
