"""The tag rule: which vocabulary tags a photo's image embedding earns, best first."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding.arrays import AnyArray, Embeddings

MAX_TAGS = 10


@dataclass(frozen=True)
class TagRule:
    """A tag passes when its cosine to the photo is at least `threshold` and exceeds the
    photo's mean cosine over the whole vocabulary by at least `margin`: the margin discounts
    a photo (or a model) that is close to every tag alike."""

    threshold: float
    margin: float


def tag_scores(vectors: Embeddings, tag_vectors: Embeddings) -> tuple[AnyArray, AnyArray]:
    """[N, V] cosines of each photo to each tag, and the same less the photo's mean cosine."""
    cosines = np.asarray(vectors, dtype=np.float32) @ np.asarray(tag_vectors, dtype=np.float32).T
    return cosines, cosines - cosines.mean(axis=1, keepdims=True)


def passing(cosines: AnyArray, excess: AnyArray, rule: TagRule) -> AnyArray:
    """[N, V] bool: the tags the rule lets through, before the per-photo cap."""
    return (cosines >= rule.threshold) & (excess >= rule.margin)


def auto_tags(
    vectors: Embeddings,
    names: Sequence[str],
    tag_vectors: Embeddings,
    rule: TagRule,
    *,
    max_tags: int = MAX_TAGS,
) -> list[list[str]]:
    """Each photo's passing tags, highest cosine first, at most `max_tags`."""
    if len(vectors) == 0:
        return []
    cosines, excess = tag_scores(vectors, tag_vectors)
    ok = passing(cosines, excess, rule)
    order = np.argsort(-cosines, axis=1, kind="stable")
    tags = []
    for row in range(len(cosines)):
        ranked = order[row][ok[row][order[row]]]
        tags.append([names[int(i)] for i in ranked[:max_tags]])
    return tags


def tagging_key(vocabulary_digest: str, rule: TagRule, max_tags: int = MAX_TAGS) -> str:
    """The `auto_tags_vocabulary` a photo's tags carry: 16 hex digits over the vocabulary's
    digest and the rule, so that a change of either says the stored tags are stale."""
    text = f"{vocabulary_digest}|{rule.threshold!r}|{rule.margin!r}|{max_tags}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
