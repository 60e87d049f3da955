"""The serving tokenizer gives open_clip's token ids without importing torch or open_clip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.embedding.tokenizer import ClipTokenizer, pad_batch
from model.onnx_export import import_open_clip
from tests.support.tokenizer_corpus import corpus


def test_ids_equal_open_clip_on_a_varied_corpus(repository: Path) -> None:
    queries = corpus()
    assert len(queries) >= 1000
    assert "" in queries and any(len(q) > 400 for q in queries)
    reference = import_open_clip().get_tokenizer("ViT-B-32")
    ours = ClipTokenizer.from_repository(repository, 1)
    expected = reference(queries).tolist()
    mismatches = []
    for query, row, got in zip(queries, expected, ours.encode_batch(queries), strict=True):
        if got + [0] * (77 - len(got)) != row:
            mismatches.append(query)
    assert mismatches == []


def test_long_text_is_cut_to_the_context_and_ends_with_end_of_text(repository: Path) -> None:
    ours = ClipTokenizer.from_repository(repository, 1)
    ids = ours.encode("word " * 200)
    assert len(ids) == 77
    assert ids[0] == ours.spec.sot_id and ids[-1] == ours.spec.eot_id
    assert ours.encode("") == [ours.spec.sot_id, ours.spec.eot_id]


def test_pad_batch_pads_to_a_multiple_capped_at_the_context() -> None:
    batch = pad_batch([[1, 2, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9]], multiple=8, context_length=77)
    assert batch.shape == (2, 16)
    assert batch[0].tolist() == [1, 2, 3] + [0] * 13
    assert pad_batch([list(range(1, 78))], multiple=8, context_length=77).shape == (1, 77)


def test_serving_side_imports_neither_torch_nor_open_clip(repository: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from core.embedding.client import EmbeddingClient\n"
        "from core.embedding.tokenizer import ClipTokenizer\n"
        "import photosearch.cli\n"
        f"t = ClipTokenizer.from_repository(Path({str(repository)!r}), 1)\n"
        "assert t.encode('a cat')[0] == t.spec.sot_id\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'open_clip')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
