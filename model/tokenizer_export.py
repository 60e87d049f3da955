"""open_clip's tokenizer -> tokenizer.json + TokenizerSpec for the serving tokenizer.

Two kinds: CLIP's BPE vocabulary (open_clip's SimpleTokenizer), written as a Hugging Face
BPE model; and open_clip's HFTokenizer (SigLIP, XLM-R, NLLB), loaded from a local folder or
file with transformers and written as its own tokenizer.json. Either way the serving
tokenizer, built from the file and the spec, must give open_clip's ids on a set of probes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from core.embedding.manifest import TokenizerSpec
from core.embedding.tokenizer import (
    SPECIAL_TOKENS,
    ClipTokenizer,
    HuggingFaceTokenizer,
    TextTokenizer,
    pad_batch,
)
from model.export_errors import ExportError

_CLEAN_MODES = {
    "_clean_lower": "lower",
    "_clean_whitespace": "whitespace",
    "_clean_canonicalize": "canonicalize",
}
_DEFAULT_CONTEXT_LENGTH = 77  # open_clip's, where a config names none
_LOCAL_TOKENIZER = (
    "a local copy: a folder with tokenizer.json and tokenizer_config.json (as published on "
    "the Hugging Face hub), or a tokenizer.json file"
)
# Texts whose ids the exported tokenizer must reproduce: scripts, punctuation, HTML entities,
# special tokens written as text, and one far past any context.
PROBES = (
    "a photo of a cat",
    "",
    "   ",
    "A Red BICYCLE, against   a brick-wall!",
    "snake_case_words and &amp;amp; entities &lt;b&gt;",
    "東京の夜景 北京 故宫",
    "서울 야경",
    "القاهرة في الليل",
    "Москва зимой",
    "नई दिल्ली",
    "กรุงเทพมหานคร",
    "🐱🚲 emoji 👩‍👩‍👧",
    "</s> <pad> <s> [SEP] [CLS] <unk> <start_of_text>",
    "word " * 300,
)


def load_open_clip_tokenizer(
    open_clip: Any, name: str, config: dict[str, Any], local: Path | None
) -> Any:
    """The tokenizer open_clip would give model `name`, from local files only: `local`
    replaces the config's text_cfg.hf_tokenizer_name (a hub name export does not download)."""
    text_cfg = config.get("text_cfg", {})
    hub_name = text_cfg.get("hf_tokenizer_name") or ""
    # open_clip picks its SigLIP tokenizer (downloaded) for such names without one.
    siglip = not hub_name and "siglip" in name.lower()
    if local is None and not hub_name:
        if siglip:
            raise ExportError(
                f"{name} uses open_clip's SigLIP tokenizer, which export does not download: "
                f"pass --tokenizer PATH, {_LOCAL_TOKENIZER}"
            )
        return open_clip.get_tokenizer(name)
    if local is None:
        local = Path(hub_name)
        if not local.exists():
            raise ExportError(
                f"{name} uses the Hugging Face tokenizer {hub_name!r}, which export does not "
                f"download: pass --tokenizer PATH, {_LOCAL_TOKENIZER}"
            )
    elif not hub_name and not siglip:
        raise ExportError(
            f"--tokenizer replaces a Hugging Face tokenizer, and {name} uses CLIP's BPE "
            "tokenizer: leave --tokenizer out"
        )
    elif not local.exists():
        raise ExportError(f"--tokenizer {local} does not exist: pass {_LOCAL_TOKENIZER}")
    mode = text_cfg.get("tokenizer_mode")
    if mode:
        raise ExportError(
            f"open_clip's tokenizer_mode {mode!r} of {name} is not supported: only the standard "
            "Hugging Face tokenization (no tokenizer_mode in text_cfg) can be served"
        )
    return _load_hf_tokenizer(local, text_cfg)


def _load_hf_tokenizer(local: Path, text_cfg: dict[str, Any]) -> Any:
    from open_clip.tokenizer import HFTokenizer

    if local.is_dir() and not (local / "tokenizer.json").is_file():
        raise ExportError(
            f"{local} has no tokenizer.json: save the tokenizer there with transformers' "
            "save_pretrained (a fast tokenizer writes one)"
        )
    with tempfile.TemporaryDirectory(prefix="photosearch-tokenizer-") as tmp:
        folder = local
        if local.is_file():
            # transformers loads folders; a lone tokenizer.json becomes one.
            folder = Path(tmp)
            shutil.copyfile(local, folder / "tokenizer.json")
        try:
            return HFTokenizer(
                str(folder),
                context_length=text_cfg.get("context_length", _DEFAULT_CONTEXT_LENGTH),
                local_files_only=True,
                **text_cfg.get("tokenizer_kwargs", {}),
            )
        except Exception as exc:  # transformers' and open_clip's errors alike
            raise ExportError(f"could not load the tokenizer at {local}: {exc}") from exc


def export_tokenizer(tokenizer: Any, path: Path) -> TokenizerSpec:
    """Save `tokenizer` (open_clip's) to `path`; return what serving needs. The padding the
    text encoder takes is decided with the encoder (model/encoders.py): "dynamic" here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if hasattr(tokenizer, "bpe_ranks"):
        return _export_clip_bpe(tokenizer, path)
    if type(tokenizer).__name__ == "HFTokenizer":
        return _export_hugging_face(tokenizer, path)
    raise ExportError(
        f"{type(tokenizer).__name__} is neither open_clip's CLIP BPE tokenizer nor its "
        "HFTokenizer: models that use it cannot be exported"
    )


def _clean_mode(tokenizer: Any) -> str:
    clean = _CLEAN_MODES.get(getattr(tokenizer.clean_fn, "__name__", ""))
    if clean is None:
        raise ExportError(f"text cleaning {tokenizer.clean_fn!r} is not supported")
    return clean


def _export_clip_bpe(tokenizer: Any, path: Path) -> TokenizerSpec:
    if getattr(tokenizer, "reduction_fn", None) is not None:
        raise ExportError("tokenizers with a reduction mask are not supported")
    clean = _clean_mode(tokenizer)
    specials = [tokenizer.decoder[i] for i in tokenizer.all_special_ids]
    if tuple(specials) != SPECIAL_TOKENS:
        raise ExportError(f"unexpected special tokens {specials}")

    merges = [pair for pair, _ in sorted(tokenizer.bpe_ranks.items(), key=lambda kv: kv[1])]
    bpe = models.BPE(vocab=dict(tokenizer.encoder), merges=merges, end_of_word_suffix="</w>")
    hf = Tokenizer(bpe)
    # Words arrive already split by open_clip's regex; only the byte-to-unicode map remains.
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    hf.save(str(path))
    return TokenizerSpec(
        file=path.name,
        context_length=int(tokenizer.context_length),
        sot_id=int(tokenizer.sot_token_id),
        eot_id=int(tokenizer.eot_token_id),
        clean=clean,
    )


def _export_hugging_face(tokenizer: Any, path: Path) -> TokenizerSpec:
    hf = tokenizer.tokenizer  # transformers' tokenizer
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ExportError(
            f"{type(hf).__name__} is a slow (Python) tokenizer: export needs a fast one, "
            "saved with its tokenizer.json"
        )
    if hf.pad_token_id is None:
        raise ExportError(
            "the tokenizer has no pad token, and open_clip pads to the context length: set "
            "pad_token in its tokenizer_config.json"
        )
    pad_id = int(hf.pad_token_id)
    sep_id = hf.sep_token_id if tokenizer.strip_sep_token else None
    if sep_id is not None and pad_id == sep_id:
        pad_id = 0  # open_clip strips after padding: pads that are sep ids become 0 too
    # The loaded state, not the folder's file: transformers and open_clip's set_language may
    # have changed the post-processor (language tokens, bos/eos) after reading it.
    out = Tokenizer.from_str(backend.to_str())
    out.no_truncation()
    out.no_padding()
    out.save(str(path))
    return TokenizerSpec(
        kind="huggingface",
        file=path.name,
        context_length=int(tokenizer.context_length),
        clean=_clean_mode(tokenizer),
        pad_id=pad_id,
        padding_side=hf.padding_side,
        truncation_side=hf.truncation_side,
        strip_sep_id=None if sep_id is None else int(sep_id),
        split_special_tokens=bool(getattr(hf, "split_special_tokens", False)),
    )


def serving_tokenizer(spec: TokenizerSpec, path: Path) -> TextTokenizer:
    """The tokenizer serving builds from this export's file and spec."""
    file = Tokenizer.from_file(str(path))
    if spec.kind == "huggingface":
        return HuggingFaceTokenizer(file, spec)
    return ClipTokenizer(file, spec)


def check_tokenizer(tokenizer: Any, spec: TokenizerSpec, path: Path) -> None:
    """Fail the export unless serving gives open_clip's ids on PROBES (padded to the context)."""
    ours = serving_tokenizer(spec, path).encode_batch(PROBES)
    ctx = spec.context_length
    got = pad_batch(ours, ctx, ctx, pad_id=spec.pad_id)
    expected = np.asarray(tokenizer(list(PROBES)).tolist(), dtype=np.int64)
    bad = [
        text for text, a, b in zip(PROBES, got, expected, strict=True) if a.tolist() != b.tolist()
    ]
    if bad:
        raise ExportError(
            f"the exported tokenizer's ids differ from open_clip's on {len(bad)} texts, e.g. "
            f"{bad[0][:60]!r}: this tokenizer is not supported"
        )
