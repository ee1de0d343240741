"""A run's tokenizer as Hugging Face directories hold it: `tokenizer.json` plus the
`tokenizer_config.json` and `special_tokens_map.json` that `AutoTokenizer` reads.

lmlab writes these itself rather than through `transformers`: a config written by one
transformers major version may not load in the other, while these few fields load in both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tokenizers import Tokenizer, processors

from lmlab.data.special_tokens import SpecialTokens

# lmlab's special-token roles → the attribute names transformers gives them.
HF_ROLE_NAMES = {"pad": "pad_token", "unk": "unk_token", "cls": "cls_token",
                 "sep": "sep_token", "mask": "mask_token", "bos": "bos_token",
                 "eos": "eos_token"}


def framed_as_lmlab_reads(tokenizer: Tokenizer, names: Mapping[str, str | None],
                          special: SpecialTokens, pair_framed: bool) -> Tokenizer:
    """A copy whose special tokens are those lmlab adds for a BERT-style model: a pair is
    `[CLS] A [SEP] B [SEP]`, B with token type 1, as fine-tuning encodes it (`A [EOS] B
    [EOS]` without [CLS] and [SEP]); one text is `[CLS] A [SEP]` for a model that read pairs
    (NSP, fine-tuned), else `A [EOS]`, as a masked LM read its documents in pre-training."""
    cls, sep, eos = names.get("cls"), names.get("sep"), names.get("eos")
    cls_and_sep = cls is not None and sep is not None
    if cls_and_sep and (pair_framed or eos is None):
        single = f"{cls}:0 $A:0 {sep}:0"
    elif eos is not None:
        single = f"$A:0 {eos}:0"
    else:
        return tokenizer
    found = [(name, index) for name, index in ((cls, special.cls), (sep, special.sep),
                                               (eos, special.eos)) if name is not None]
    framed = Tokenizer.from_str(tokenizer.to_str())
    framed.post_processor = processors.TemplateProcessing(
        single=single, pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1" if cls_and_sep
        else f"$A:0 {eos}:0 $B:1 {eos}:1", special_tokens=found)
    return framed


def tokenizer_config(names: Mapping[str, str | None], sentinels: list[str], max_len: int,
                     token_types: bool) -> dict:
    """tokenizer_config.json: the fast tokenizer class, its special tokens and inputs."""
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if token_types else [
        "input_ids", "attention_mask"]
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
            "model_input_names": inputs, "padding_side": "right",
            "clean_up_tokenization_spaces": False, **special_tokens_map(names, sentinels)}


def special_tokens_map(names: Mapping[str, str | None], sentinels: list[str]) -> dict:
    found = {HF_ROLE_NAMES[role]: name for role, name in names.items() if name is not None}
    return {**found, **({"additional_special_tokens": sentinels} if sentinels else {})}


def mask_absorbs_space(tokenizer: Tokenizer, mask: str | None) -> Tokenizer:
    """A copy whose [MASK] takes the space before it, as lmlab's fill-mask reads "a [MASK]"
    (lmlab.runs.reading.absorb_space_before), and RoBERTa's <mask> does (lstrip)."""
    if mask is None:
        return tokenizer
    settings = json.loads(tokenizer.to_str())
    for token in settings.get("added_tokens", []):
        if token["content"] == mask:
            token["lstrip"] = True
    return Tokenizer.from_str(json.dumps(settings))


def write_tokenizer_files(out: Path, tokenizer: Tokenizer, names: Mapping[str, str | None],
                          special: SpecialTokens, max_len: int, token_types: bool,
                          pair_framed: bool, framed: bool) -> None:
    """The three files; `framed` (encoders, embeddings) gives lmlab's framing and a [MASK]
    that absorbs the space before it, else the tokenizer keeps its own framing (a prompt for
    a causal model to continue must not end in [EOS])."""
    vocabulary = {index: token for token, index in
                  tokenizer.get_vocab(with_added_tokens=True).items()}
    sentinels = [vocabulary[index] for index in special.sentinels]
    framed = (mask_absorbs_space(framed_as_lmlab_reads(tokenizer, names, special, pair_framed),
                                 names.get("mask")) if framed else tokenizer)
    (out / "tokenizer.json").write_text(framed.to_str())
    files = {"tokenizer_config.json": tokenizer_config(names, sentinels, max_len, token_types),
             "special_tokens_map.json": special_tokens_map(names, sentinels)}
    for name, content in files.items():
        (out / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")
