"""Write open_clip's BPE vocabulary as a Hugging Face tokenizer.json for the serving tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from core.embedding.manifest import TokenizerSpec
from core.embedding.tokenizer import SPECIAL_TOKENS

_CLEAN_MODES = {"_clean_lower": "lower", "_clean_whitespace": "whitespace"}


def export_tokenizer(tokenizer: Any, path: Path) -> TokenizerSpec:
    """Save `tokenizer` (an open_clip SimpleTokenizer) to `path`; return what serving needs."""
    if not hasattr(tokenizer, "bpe_ranks"):
        raise ValueError(
            f"{type(tokenizer).__name__} is not open_clip's CLIP BPE tokenizer: "
            "only models that use it can be exported"
        )
    if getattr(tokenizer, "reduction_fn", None) is not None:
        raise ValueError("tokenizers with a reduction mask are not supported")
    clean = _CLEAN_MODES.get(getattr(tokenizer.clean_fn, "__name__", ""))
    if clean is None:
        raise ValueError(f"text cleaning {tokenizer.clean_fn!r} is not supported")
    specials = [tokenizer.decoder[i] for i in tokenizer.all_special_ids]
    if tuple(specials) != SPECIAL_TOKENS:
        raise ValueError(f"unexpected special tokens {specials}")

    merges = [pair for pair, _ in sorted(tokenizer.bpe_ranks.items(), key=lambda kv: kv[1])]
    bpe = models.BPE(vocab=dict(tokenizer.encoder), merges=merges, end_of_word_suffix="</w>")
    hf = Tokenizer(bpe)
    # Words arrive already split by open_clip's regex; only the byte-to-unicode map remains.
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    path.parent.mkdir(parents=True, exist_ok=True)
    hf.save(str(path))
    return TokenizerSpec(
        file=path.name,
        context_length=int(tokenizer.context_length),
        sot_id=int(tokenizer.sot_token_id),
        eot_id=int(tokenizer.eot_token_id),
        clean=clean,
    )
