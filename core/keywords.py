"""The words of a photo and of a query, as sparse vectors the vector store ranks by BM25.

A photo's vector holds each word of its title, tags and photographer once, weighted by BM25's
term-frequency part, and the words only its automatic tags hold at AUTO_TAG_WEIGHT of that;
the store multiplies each by the word's IDF over the collection (Qdrant's IDF modifier), and
a query's vector holds each of its words with weight 1, so the dot product is the photo's BM25
score. Words are compared case- and accent-insensitively ("Café" = "cafe").
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping

from core.payload import PhotoPayload
from core.vectorstore.base import AUTO_TAGS_FIELD, SparseVector

# BM25's usual constants; AVERAGE_WORDS stands for the collection's mean length (a title and
# a few tags), fixed because a photo's vector is written once and never re-weighted.
K1 = 1.2
B = 0.75
AVERAGE_WORDS = 12.0
# The fields whose words a person wrote, and all the fields a keyword search matches: those
# and the automatic tags the indexer derives from the image (indexer/photo/autotags.py).
FIELDS = ("title", "tags", "photographer")
WORD_FIELDS = (*FIELDS, AUTO_TAGS_FIELD)
# A word that only a photo's automatic tags hold weighs this share of the same word typed by a
# person: the model's guess is evidence of the word, weaker than a photographer's (a rule
# calibrated to beat chance still errs), so for one word a photo its photographer tagged
# ranks above one the model tagged, and both above photos without it. The automatic words
# leave the document's length alone: re-tagging never moves how its human words weigh.
AUTO_TAG_WEIGHT = 0.5
# Words too common to tell photos apart. IDF would weigh them down anyway; left out, "a dog in
# the snow" does not match every title with "the" in it at all.
STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it its of on or the to with".split()
)
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The words of a text: accents dropped, case folded, stopwords left out."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return [w for w in _WORD.findall(plain) if w not in STOPWORDS]


def word_id(word: str) -> int:
    """A word's index in the sparse vector: 32 bits of its hash (Qdrant's indices are u32)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")


def photo_words(payload: PhotoPayload, fields: tuple[str, ...] = WORD_FIELDS) -> list[str]:
    """The words of a photo a keyword search matches: its title, tags, photographer and
    automatic tags (`fields`: only these)."""
    texts: list[str] = []
    for name in fields:
        value = payload.get(name)
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.extend(v for v in value if isinstance(v, str))
    return [w for text in texts for w in words(text)]


def _sparse(weights: Mapping[int, float]) -> SparseVector:
    ordered = sorted(weights.items())
    return SparseVector(tuple(i for i, _ in ordered), tuple(v for _, v in ordered))


def document_vector(payload: PhotoPayload) -> SparseVector:
    """A photo's keyword vector (empty when it has no words)."""
    found = photo_words(payload, FIELDS)
    norm = K1 * (1 - B + B * len(found) / AVERAGE_WORDS)
    typed = Counter(found)
    guessed = Counter(w for w in photo_words(payload, (AUTO_TAGS_FIELD,)) if w not in typed)
    weights: dict[int, float] = {}
    for counts, share in ((typed, 1.0), (guessed, AUTO_TAG_WEIGHT)):
        for word, tf in counts.items():
            index = word_id(word)
            # Two words with one hash (rare at 32 bits) add up, as the same word repeated would.
            weights[index] = weights.get(index, 0.0) + share * tf * (K1 + 1) / (tf + norm)
    return _sparse(weights)


def query_vector(text: str | Iterable[str]) -> SparseVector:
    """A query's keyword vector: each distinct word once, weight 1 (empty: no words)."""
    found = words(text) if isinstance(text, str) else [w for t in text for w in words(t)]
    return _sparse(dict.fromkeys((word_id(w) for w in found), 1.0))
