"""The tag vocabulary: its names from a file, its prompts, and its embedding by a text encoder."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from core.embedding.arrays import Embeddings

# CLIP's zero-shot habit: a concept's embedding is the mean over several phrasings, so that
# no one sentence's quirks decide it.
TEMPLATES: tuple[str, ...] = (
    "a photo of {}.",
    "a picture of {}.",
    "a close-up photo of {}.",
    "an image showing {}.",
    "{}",
)
DEFAULT_VOCABULARY = "stock.txt"
# Texts per call of the embedding function: bounds one request's memory, not its meaning.
CHUNK = 256


class VocabularyError(ValueError):
    """A vocabulary file that holds no usable name."""


@dataclass(frozen=True)
class Vocabulary:
    """The tag names, in the file's order, and the digest of names and templates: tags made
    with another digest were made from other embeddings."""

    names: tuple[str, ...]
    digest: str
    source: str = ""

    def __len__(self) -> int:
        return len(self.names)


def normalise(name: str) -> str:
    """A name as tags store it: lowercase, single spaces."""
    return " ".join(name.lower().split())


def vocabulary_digest(names: tuple[str, ...], templates: tuple[str, ...] = TEMPLATES) -> str:
    """16 hex digits of sha256 over the templates and names (order counts)."""
    text = "\n".join(("templates:", *templates, "names:", *names))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_vocabulary(text: str, source: str = "") -> Vocabulary:
    """One name a line; blank lines and '#' comments skipped; a repeated name kept once."""
    names: dict[str, None] = {}
    for line in text.splitlines():
        name = normalise(line.split("#", 1)[0])
        if name:
            names.setdefault(name, None)
    if not names:
        raise VocabularyError(f"the vocabulary {source or '(text)'} names no tag")
    kept = tuple(names)
    return Vocabulary(kept, vocabulary_digest(kept), source)


def load_vocabulary(path: Path | None = None) -> Vocabulary:
    """The vocabulary in `path`; None: the shipped stock-photo vocabulary (about 1,000)."""
    if path is None:
        shipped = resources.files("core.tagging") / "vocabularies" / DEFAULT_VOCABULARY
        return parse_vocabulary(
            shipped.read_text(encoding="utf-8"), f"shipped {DEFAULT_VOCABULARY}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise VocabularyError(f"cannot read the vocabulary {path}: {exc}") from None
    return parse_vocabulary(text, str(path))


def prompts(name: str) -> list[str]:
    """The sentences whose embeddings average into the tag's."""
    return [template.format(name) for template in TEMPLATES]


def embed_vocabulary(
    vocab: Vocabulary, embed_texts: Callable[[list[str]], Embeddings]
) -> Embeddings:
    """[V, D] float32: each tag the mean of its prompts' embeddings, L2-normalized again."""
    texts = [text for name in vocab.names for text in prompts(name)]
    rows = [embed_texts(texts[i : i + CHUNK]) for i in range(0, len(texts), CHUNK)]
    every = np.concatenate(rows).astype(np.float32, copy=False)
    per_tag = every.reshape(len(vocab.names), len(TEMPLATES), every.shape[1]).mean(axis=1)
    norms = np.linalg.norm(per_tag, axis=1, keepdims=True)
    normalised: Embeddings = (per_tag / np.maximum(norms, 1e-12)).astype(np.float32)
    return normalised
