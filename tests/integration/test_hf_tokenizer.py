"""Models with a Hugging Face tokenizer (SigLIP-style): open_clip's ids served without
transformers, a fixed-length text graph through the real Triton, and what export refuses."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException
from typer.testing import CliRunner

from core.embedding.arrays import row_cosines
from core.embedding.client import EmbeddingClient
from core.embedding.manifest import (
    TEXT_MODEL,
    ModelManifest,
    TokenizerSpec,
    list_versions,
    load_manifest,
)
from core.embedding.tokenizer import HuggingFaceTokenizer, load_tokenizer, pad_batch, pad_for
from harness.processes import triton_ports
from model.cli import model_app
from model.onnx_export import import_open_clip
from model.repository import common_shapes, version_dir
from model.tokenizer_export import export_tokenizer, load_open_clip_tokenizer
from model.triton_config import BatchingOptions, parse, text_config
from model.triton_server import TritonServer
from tests.support.hf_tokenizers import (
    LONG_QUERIES,
    WORLD_QUERIES,
    queries,
    siglip_config,
    train_tokenizer,
)
from tests.support.models import TINY_CONFIG

CONTEXT = 24  # the tiny SigLIP's (siglip_config)
QUERIES = ["a cat", "A Red_Bicycle, against a brick wall!", "", "東京の夜景", "sunset " * 40]


@dataclass
class Siglip:
    """The tiny SigLIP exported as version 2 beside the tiny CLIP's version 1, served."""

    repository: Path
    tokenizer_dir: Path
    clip: Any  # open_clip's PyTorch model the export must agree with
    reference: Any  # open_clip's HFTokenizer for it
    triton: TritonServer

    @property
    def manifest(self) -> ModelManifest:
        return load_manifest(self.repository, 2)


@pytest.fixture(scope="module")
def siglip(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Siglip]:
    from open_clip.tokenizer import HFTokenizer

    work = tmp_path_factory.mktemp("siglip")
    tokenizer_dir = train_tokenizer(work / "tokenizer", "unigram")
    # The config names a hub tokenizer, as open_clip's SigLIP configs do: --tokenizer replaces it.
    config = siglip_config(work / "tiny-siglip.json", "timm/ViT-B-16-SigLIP")
    open_clip = import_open_clip()
    open_clip.add_model_config(config)
    torch.manual_seed(3)
    clip = open_clip.create_model(config.stem, pretrained=None).eval()
    checkpoint = work / "tiny-siglip.pt"
    torch.save(clip.state_dict(), checkpoint)
    repo = work / "models"
    shutil.copytree(repository, repo)
    args = ["export", "--arch", str(config), "--pretrained", str(checkpoint)]
    result = CliRunner().invoke(
        model_app, [*args, "--tokenizer", str(tokenizer_dir), "--repository", str(repo)]
    )
    assert result.exit_code == 0, result.output
    assert f"text {CONTEXT} tokens fixed" in result.output
    reference = HFTokenizer(str(tokenizer_dir), context_length=CONTEXT, clean="canonicalize")
    with TritonServer(repo, triton_ports(), work / "triton") as server:
        yield Siglip(repo, tokenizer_dir, clip, reference, server)


@pytest.fixture
async def siglip_client(siglip: Siglip) -> AsyncIterator[EmbeddingClient]:
    async with EmbeddingClient(siglip.triton.url, siglip.repository) as client:
        yield client


# flavour, open_clip's tokenizer_kwargs, padding side
PARITY_CASES = [
    ("unigram", {"clean": "canonicalize"}, "right"),  # SigLIP
    ("wordpiece", {"clean": "lower", "strip_sep_token": True}, "right"),  # CLIPA
    ("bytelevel", {}, "right"),  # case kept ('whitespace'), pad id 1
    ("bytelevel", {"clean": "lower"}, "left"),
]


def _exported(
    tmp_path: Path, flavour: str, kwargs: dict[str, Any], side: str
) -> tuple[Any, HuggingFaceTokenizer]:
    """open_clip's own tokenizer for a config naming the trained folder, and the serving one
    built from what export writes."""
    folder = train_tokenizer(tmp_path / "tokenizer", flavour, padding_side=side)
    name = f"hf-parity-{flavour}-{side}-{len(kwargs)}"
    config = siglip_config(tmp_path / f"{name}.json", str(folder), tokenizer_kwargs=kwargs)
    open_clip = import_open_clip()
    open_clip.add_model_config(config)
    reference = open_clip.get_tokenizer(name)
    loaded = load_open_clip_tokenizer(open_clip, name, open_clip.get_model_config(name), None)
    spec = export_tokenizer(loaded, tmp_path / "tokenizer.json")
    spec = spec.model_copy(update={"padding": "fixed"})
    return reference, HuggingFaceTokenizer(
        Tokenizer.from_file(str(tmp_path / "tokenizer.json")), spec
    )


@pytest.mark.parametrize(("flavour", "kwargs", "side"), PARITY_CASES)
def test_ids_equal_open_clip_hf_tokenizer_on_corpus_scripts_and_long_queries(
    tmp_path: Path, flavour: str, kwargs: dict[str, Any], side: str
) -> None:
    texts = queries()
    assert len(texts) >= 1000 + len(WORLD_QUERIES) + len(LONG_QUERIES)
    reference, ours = _exported(tmp_path, flavour, kwargs, side)
    expected = reference(texts).tolist()
    got = pad_batch(ours.encode_batch(texts), CONTEXT, CONTEXT, pad_id=ours.spec.pad_id)
    mismatches = [t for t, row, g in zip(texts, expected, got, strict=True) if g.tolist() != row]
    assert mismatches == []
    assert ours.spec.padding_side == side
    # The long queries were cut to the context (special tokens kept, as open_clip keeps them).
    hf = reference.tokenizer
    assert all(len(hf(reference.clean_fn(t)).input_ids) > CONTEXT for t in LONG_QUERIES)


def test_cleaning_decides_the_ids_and_the_cache_key(tmp_path: Path) -> None:
    reference, ours = _exported(tmp_path, "unigram", {"clean": "canonicalize"}, "right")
    assert ours.normalize("  A Red_Bicycle, &amp; a WALL!! ") == "a red bicycle a wall"
    assert ours.encode("A Red_Bicycle!") == ours.encode(ours.normalize("A Red_Bicycle!"))
    # Without open_clip's canonicalize the ids differ: the parity test above can fail.
    wrong = HuggingFaceTokenizer(
        Tokenizer.from_file(str(tmp_path / "tokenizer.json")),
        ours.spec.model_copy(update={"clean": "whitespace"}),
    )
    texts = queries()
    expected = reference(texts).tolist()
    got = pad_batch(wrong.encode_batch(texts), CONTEXT, CONTEXT, pad_id=ours.spec.pad_id)
    assert sum(g.tolist() != row for row, g in zip(expected, got, strict=True)) > 100


def test_manifests_of_earlier_releases_read_as_clip_bpe_with_dynamic_length(
    manifest: ModelManifest,
) -> None:
    old = TokenizerSpec.model_validate(
        {"file": "tokenizer.json", "context_length": 77, "sot_id": 49406, "eot_id": 49407}
    )
    assert (old.kind, old.padding, old.pad_id, old.clean) == ("clip_bpe", "dynamic", 0, "lower")
    assert (manifest.tokenizer.kind, manifest.tokenizer.padding) == ("clip_bpe", "dynamic")


def test_siglip_export_is_fixed_length_in_manifest_graph_and_triton_config(
    siglip: Siglip,
) -> None:
    spec = siglip.manifest.tokenizer
    assert (spec.kind, spec.padding, spec.context_length) == ("huggingface", "fixed", CONTEXT)
    assert (spec.pad_id, spec.clean) == (1, "canonicalize")
    assert "clip_text/2/tokenizer.json" in siglip.manifest.files
    graph = version_dir(siglip.repository, TEXT_MODEL, 2) / "model.onnx"
    shape = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"]).get_inputs()
    assert shape[0].shape[1] == CONTEXT
    # Served alone: exactly the context, nothing ragged, warmup and TensorRT at that length.
    for target in ("cpu", "gpu"):
        alone = text_config(target, common_shapes([siglip.manifest]), BatchingOptions())
        assert list(alone.input[0].dims) == [CONTEXT]
        assert not alone.input[0].allow_ragged_batch
        assert list(alone.model_warmup[0].inputs["input_ids"].dims) == [CONTEXT]
    profile = alone.parameters["trt_profile_min_shapes"].string_value
    assert profile == f"input_ids:1x{CONTEXT}"
    # Beside the CLIP (dynamic, 77): any length, ragged, each version keeps its own rule.
    served = parse((siglip.repository / TEXT_MODEL / "config.pbtxt").read_text())
    assert list(served.input[0].dims) == [-1]
    assert served.input[0].allow_ragged_batch
    assert list(served.model_warmup[0].inputs["input_ids"].dims) == [CONTEXT]


async def test_siglip_embeddings_through_triton_equal_open_clip_encode_text(
    siglip: Siglip, siglip_client: EmbeddingClient, reference_clip: Any
) -> None:
    got = await siglip_client.encode_texts(QUERIES, model_version=2)
    ids = siglip.reference(QUERIES)
    assert siglip_client.tokenizer(2).encode_batch(QUERIES) == ids.tolist()
    with torch.no_grad():
        ref = siglip.clip.encode_text(ids, normalize=True).numpy()
    assert got.shape == (len(QUERIES), 32)
    assert row_cosines(got, ref).min() > 0.9999
    # The CLIP beside it still serves its own embeddings, at its dynamic length.
    clip_got = await siglip_client.encode_texts(QUERIES, model_version=1)
    clip_ids = pad_batch(siglip_client.tokenizer(1).encode_batch(QUERIES), 77, 77)
    with torch.no_grad():
        clip_ref = reference_clip.encode_text(torch.from_numpy(clip_ids), normalize=True).numpy()
    assert row_cosines(clip_got, clip_ref).min() > 0.9999


async def test_a_short_query_is_sent_at_full_length_where_shortening_would_change_it(
    siglip: Siglip, siglip_client: EmbeddingClient
) -> None:
    spec = siglip.manifest.tokenizer
    ids = siglip_client.tokenizer(2).encode_batch(["a cat"])
    batch = pad_for(spec, ids, multiple=8)
    assert batch.shape == (1, CONTEXT) and (batch[0, 3:] == spec.pad_id).all()
    full = torch.from_numpy(batch)
    with torch.no_grad():
        at_full = siglip.clip.encode_text(full, normalize=True).numpy()
        shortened = siglip.clip.encode_text(full[:, :8], normalize=True).numpy()
    # A bidirectional tower sees its padding: the dynamic shortcut would be another embedding.
    assert row_cosines(shortened, at_full).min() < 0.999
    got = await siglip_client.encode_texts(["a cat"], model_version=2)
    assert row_cosines(got, at_full).min() > 0.9999


def test_a_fixed_length_version_refuses_other_lengths_instead_of_padding_them(
    siglip: Siglip,
) -> None:
    client = grpcclient.InferenceServerClient(siglip.triton.url)

    def infer(length: int) -> Any:
        data = np.full((1, length), siglip.manifest.tokenizer.pad_id, dtype=np.int64)
        tensor = grpcclient.InferInput("input_ids", list(data.shape), "INT64")
        tensor.set_data_from_numpy(data)
        return client.infer(TEXT_MODEL, [tensor], model_version="2").as_numpy("text_embeds")

    try:
        assert infer(CONTEXT).shape == (1, 32)
        with pytest.raises(InferenceServerException, match=f"exactly {CONTEXT} token ids"):
            infer(8)
    finally:
        client.close()


def test_serving_a_hf_tokenizer_imports_neither_transformers_nor_torch(siglip: Siglip) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from core.embedding.tokenizer import load_tokenizer\n"
        f"t = load_tokenizer(Path({str(siglip.repository)!r}), 2)\n"
        f"assert len(t.encode('a cat')) == {CONTEXT}\n"
        "heavy = ('torch', 'open_clip', 'transformers')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert type(load_tokenizer(siglip.repository, 2)) is HuggingFaceTokenizer


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing path", "does not exist"),
        ("hub name, no --tokenizer", "pass --tokenizer PATH"),
        ("tokenizer_mode clips", "tokenizer_mode 'clips'"),
        ("CLIP BPE model", "leave --tokenizer out"),
        ("folder without tokenizer.json", "has no tokenizer.json"),
    ],
)
def test_export_refuses_what_it_cannot_serve_and_says_what_to_change(
    tmp_path: Path, case: str, message: str
) -> None:
    folder = train_tokenizer(tmp_path / "tokenizer", "unigram")
    arch = siglip_config(tmp_path / "tiny-siglip-refused.json", "timm/ViT-B-16-SigLIP")
    tokenizer: list[str] = ["--tokenizer", str(folder)]
    if case == "missing path":
        tokenizer = ["--tokenizer", str(tmp_path / "nowhere")]
    elif case == "hub name, no --tokenizer":
        tokenizer = []
    elif case == "tokenizer_mode clips":
        arch = siglip_config(arch, "timm/ViT-B-16-SigLIP", tokenizer_mode="clips")
    elif case == "CLIP BPE model":
        arch = TINY_CONFIG
    else:
        (folder / "tokenizer.json").unlink()
    repo = tmp_path / "models"
    args = ["export", "--arch", str(arch), "--pretrained", "none", "--repository", str(repo)]
    result = CliRunner().invoke(model_app, [*args, *tokenizer])
    assert result.exit_code == 2
    assert "export failed" in result.output and message in result.output
    assert list_versions(repo) == []
