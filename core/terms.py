"""A photo's `terms` (the distinct words of its title and tags) and the folded form in which
suggestions compare a typed prefix with them."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from core.keywords import words

# The payload field the indexer writes and the store indexes (a keyword list), whose counts
# the API reads as its vocabulary of suggestions.
TERMS_FIELD: Final = "terms"
# A word longer than this is no word a person types (a hash, a URL run together).
MAX_TERM_CHARS = 40
# A title of a thousand words would cost the index a thousand values for one photo.
MAX_TERMS = 64
_SPACES = re.compile(r"\s+")


def fold(text: str) -> str:
    """Accents dropped, case folded, spaces collapsed: how the keyword side compares words
    ("Café" = "cafe"), so a prefix typed either way finds the same completions."""
    if text.isascii():  # most text: nothing to decompose (an index of 1e5 builds 5x faster)
        return _SPACES.sub(" ", text.lower()).strip()
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return _SPACES.sub(" ", plain).strip()


def photo_terms(metadata: Mapping[str, Any]) -> list[str]:
    """The distinct words of a photo's title and tags (folded, stopwords left out), in the
    order they first appear; the first MAX_TERMS of them."""
    texts: list[str] = []
    title = metadata.get("title")
    if isinstance(title, str):
        texts.append(title)
    tags = metadata.get("tags")
    if isinstance(tags, list):
        texts.extend(tag for tag in tags if isinstance(tag, str))
    found = (w for text in texts for w in words(text) if 1 < len(w) <= MAX_TERM_CHARS)
    return list(dict.fromkeys(found))[:MAX_TERMS]
