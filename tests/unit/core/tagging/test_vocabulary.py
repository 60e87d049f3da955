"""The tag vocabulary: the shipped file, parsing a user's file, and embedding by templates."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.tagging.vocabulary import (
    DEFAULT_VOCABULARY,
    TEMPLATES,
    VocabularyError,
    embed_vocabulary,
    load_vocabulary,
    parse_vocabulary,
    prompts,
)

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = ROOT / "core" / "tagging" / "vocabularies" / DEFAULT_VOCABULARY


def test_the_shipped_vocabulary_holds_about_a_thousand_distinct_concepts() -> None:
    lines = [line for line in SHIPPED.read_text().splitlines() if not line.startswith("#")]
    assert all(line.strip() for line in lines), "a blank line in the vocabulary"
    assert all(line == " ".join(line.lower().split()) for line in lines)
    assert len(lines) == len(set(lines)), "a duplicate name"
    assert 900 <= len(lines) <= 1200
    vocab = load_vocabulary(None)
    assert vocab.names == tuple(lines)
    assert {"dog", "beach", "coffee", "businessman", "sunset", "red"} <= set(vocab.names)


def test_the_shipped_vocabulary_is_package_data_of_the_wheel() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]["core"]
    assert any(SHIPPED.relative_to(ROOT / "core").match(p) for p in patterns)


def test_a_file_is_read_without_comments_blanks_or_repeats(tmp_path: Path) -> None:
    path = tmp_path / "tags.txt"
    path.write_text("# mine\nRed  Circle\n\nstar # a shape\nred circle\n")
    vocab = load_vocabulary(path)
    assert vocab.names == ("red circle", "star")
    assert vocab.source == str(path)


def test_the_digest_changes_with_the_names_and_their_order() -> None:
    a, b, c = (parse_vocabulary(t) for t in ("a\nb\n", "b\na\n", "a\nb\nc\n"))
    assert len({a.digest, b.digest, c.digest}) == 3
    assert parse_vocabulary("a\n# x\nb").digest == a.digest


def test_an_empty_or_missing_vocabulary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="names no tag"):
        parse_vocabulary("# only a comment\n\n")
    with pytest.raises(VocabularyError, match="cannot read"):
        load_vocabulary(tmp_path / "absent.txt")


def test_prompts_fill_every_template() -> None:
    assert prompts("dog") == [t.format("dog") for t in TEMPLATES]
    assert "a photo of dog." in prompts("dog")


def test_a_tag_embeds_as_the_renormalised_mean_of_its_prompts() -> None:
    rng = np.random.default_rng(0)
    table: dict[str, Embeddings] = {}
    calls: list[int] = []

    def embed(texts: list[str]) -> Embeddings:
        calls.append(len(texts))
        for text in texts:
            if text not in table:
                v = rng.normal(size=8).astype(np.float32)
                table[text] = v / np.linalg.norm(v)
        return np.stack([table[t] for t in texts])

    names = "\n".join(f"tag {i}" for i in range(60))  # 300 prompts: two calls
    vocab = parse_vocabulary(names)
    vectors = embed_vocabulary(vocab, embed)
    assert vectors.shape == (60, 8) and vectors.dtype == np.float32
    assert len(calls) == 2
    for row, name in enumerate(vocab.names):
        mean = np.mean([table[p] for p in prompts(name)], axis=0)
        np.testing.assert_allclose(vectors[row], mean / np.linalg.norm(mean), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
