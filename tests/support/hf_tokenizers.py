"""Small Hugging Face tokenizers trained here, offline, and a tiny SigLIP-style open_clip config.

Three flavours of what open_clip's HFTokenizer loads from the hub: a SentencePiece-like
Unigram that appends </s> and pads with it (SigLIP), a BERT WordPiece with [CLS] ... [SEP]
(CLIPA's strip_sep_token), and a byte-level BPE with <s> ... </s> padded with id 1 (RoBERTa,
case kept). Each is saved with transformers' save_pretrained: tokenizer.json and
tokenizer_config.json, the folder as published on the hub.
"""
# ruff: noqa: RUF001  (look-alike characters from other scripts are the point of these queries)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.tokenizer_corpus import corpus

# Queries in scripts the CLIP corpus has little of, with rare and unknown characters.
WORLD_QUERIES = [
    "東京の夜景と桜",
    "北京故宫的雪景",
    "上海外滩 夜晚 灯光",
    "서울의 가을 단풍",
    "القاهرة في الليل",
    "مسجد في إسطنبول عند الغروب",
    "Москва зимой, Красная площадь",
    "Київ навесні",
    "Αθήνα Ακρόπολη το σούρουπο",
    "नई दिल्ली में बारिश",
    "ताजमहल सूर्योदय के समय",
    "กรุงเทพมหานคร ตลาดน้ำ",
    "ירושלים העתיקה",
    "ভোরের ঢাকা",
    "தமிழ்நாடு கோயில்",
    "ქართული ღვინო",
    "Հայաստան լեռներ",
    "ኢትዮጵያ ቡና",
    "🐱🚲🌅 cat, bike & sunset",
    "👩‍👩‍👧‍👦 family at the beach 🏖️",
    "🇯🇵 flag 🇫🇷 flag",
    "Zürich Straße über Ärger",
    "İstanbul'da ığdır şehri",
    "Tiếng Việt phở bò Hà Nội",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３",
    "ﬁ ligature ﬂ and ½ fraction ²",
    "tab\tand\nnewline   spaces",
    "snake_case_query and kebab-case-query!",
    "&lt;b&gt;bold&lt;/b&gt; &amp;amp; entities",
    "</s> <pad> [SEP] [CLS] <s> <unk> [PAD] [MASK]",
    "MiXeD CaSe QuErY",
    "\u200bzero\u200dwidth\ufeffjoiners",
    "",
    " ",
    # One word past WordPiece's 100 characters: a single unknown token there.
    "🐱" * 120,
    "supercalifragilisticexpialidocious" * 12,
]
LONG_QUERIES = [
    "a very long query about " + " ".join(f"thing{i}" for i in range(120)),
    "東京 " * 80,
    "🐱 " * 60,
    "word " * 300,
    "supercalifragilisticexpialidocious " * 30,
]
FLAVOURS = ("unigram", "wordpiece", "bytelevel")
VOCAB_SIZE = 2000


def queries() -> list[str]:
    """The CLIP parity corpus (>= 1,000 queries) with the world and long queries."""
    return corpus() + WORLD_QUERIES + LONG_QUERIES


def train_tokenizer(folder: Path, flavour: str = "unigram", padding_side: str = "right") -> Path:
    """Train a small tokenizer on the queries and save it as transformers would publish it."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    # Not trained on the long queries: their repeats would become single tokens.
    texts = (corpus() + WORLD_QUERIES) * 2
    special: dict[str, Any]
    if flavour == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
        )
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        names = ["<pad>", "</s>", "<unk>"]
        trainer: Any = trainers.UnigramTrainer(
            vocab_size=VOCAB_SIZE, special_tokens=names, unk_token="<unk>"
        )
        tok.train_from_iterator(texts, trainer)
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))]
        )
        # SigLIP pads with its end-of-text id, 1 (open_clip's SigLipTokenizer does too).
        special = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"}
    elif flavour == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        names = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        trainer = trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=names)
        tok.train_from_iterator(texts, trainer)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
        )
        special = {
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "mask_token": "[MASK]",
        }
    elif flavour == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        names = ["<s>", "<pad>", "</s>", "<unk>"]
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB_SIZE,
            special_tokens=names,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(texts, trainer)
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", _id(tok, "</s>")), ("<s>", _id(tok, "<s>"))
        )
        special = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
        }
    else:
        raise ValueError(f"unknown flavour {flavour!r}")
    assert tok.get_vocab_size() <= VOCAB_SIZE
    hf = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, padding_side=padding_side, **special
    )
    hf.save_pretrained(str(folder))
    return folder


def _id(tokenizer: Any, token: str) -> int:
    found = tokenizer.token_to_id(token)
    assert found is not None, token
    return int(found)


def siglip_config(path: Path, tokenizer: str, **text_cfg: Any) -> Path:
    """A tiny SigLIP-style CustomTextCLIP: bidirectional text tower pooled at the last position,
    text_cfg.hf_tokenizer_name = `tokenizer`, canonicalized text (as SigLIP's configs)."""
    config = {
        "embed_dim": 32,
        "custom_text": True,
        "init_logit_bias": -10,
        "vision_cfg": {
            "image_size": 32,
            "layers": 1,
            "width": 64,
            "head_width": 32,
            "patch_size": 8,
        },
        "text_cfg": {
            "context_length": 24,
            "vocab_size": VOCAB_SIZE,
            "hf_tokenizer_name": tokenizer,
            "tokenizer_kwargs": {"clean": "canonicalize"},
            "width": 64,
            "heads": 2,
            "layers": 2,
            "no_causal_mask": True,
            "proj_bias": True,
            "pool_type": "last",
            "norm_kwargs": {"eps": 1e-6},
        }
        | text_cfg,
    }
    path.write_text(json.dumps(config, indent=1))
    return path
