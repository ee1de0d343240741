"""What `prepare` does to a corpus, as one typed, frozen record saved in meta.json.

The same fields come from the command line, a YAML or TOML recipe file, or keyword arguments
of `lmlab.data.prepare`; a dataset directory is reused only when its recipe is the same.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from lmlab.config.settings_file import read_settings
from lmlab.data.errors import DataError
from lmlab.data.preparation.choices import NORMALISATIONS, SENTENCE_RULES
from lmlab.data.preparation.cleaning import CleaningConfig, QualityThresholds
from lmlab.data.preparation.near_dedup import NearDedupConfig
from lmlab.data.preparation.tokenizer_training import TOKENIZER_KINDS
from lmlab.data.shards import token_dtype
from lmlab.data.tokenizer import SPECIAL_TOKENS

# The annotation of each kind of field → the Python types a value may have.
FIELD_TYPES = {"tuple[str, ...]": (tuple,), "str": (str,), "bool": (bool,), "int": (int,),
               "float": (float, int), "float | None": (float, int, type(None)),
               "dict | None": (dict, type(None))}


@dataclass(frozen=True)
class Recipe:
    sources: tuple[str, ...] = ()  # SOURCE[:WEIGHT] each; none = the built-in corpus
    # reading (see readers.py)
    text_field: str = "text"
    blank_line_documents: bool = False
    strict: bool = False
    # cleaning, in this order (see cleaning.py); each step can be turned off
    normalisation: str = "NFC"
    strip_control: bool = True
    exact_dedup: bool = True
    quality_filter: bool = False  # Gopher's rules, tuned for web crawl
    near_dedup_threshold: float | None = 0.8  # Jaccard similarity; None = off
    # splitting and tokenizing
    validation_fraction: float = 0.05
    tokenizer: str = "bpe"  # bpe | wordpiece | unigram, or a tokenizer.json to reuse
    # A reused tokenizer's special tokens by role (pad, unk, cls, sep, mask, bos, eos → token
    # or None), as an imported run records them; None = lmlab's names
    special_tokens: dict | None = None
    vocab_size: int = 8192  # for a trained tokenizer
    sentinels: int = 100  # <extra_id_N> tokens for span corruption
    sentence_split: str = "punctuation"  # or "lines": one sentence per line
    seed: int = 0  # for up- and down-sampling weighted sources

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(str(s) for s in self.sources))
        for f in fields(self):
            value, allowed = getattr(self, f.name), FIELD_TYPES[f.type]
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise DataError(f"{f.name} takes {f.type}, got {value!r}")
        if self.normalisation not in NORMALISATIONS:
            raise DataError(f"normalisation must be one of {', '.join(NORMALISATIONS)}, got "
                            f"{self.normalisation!r}")
        if self.sentence_split not in SENTENCE_RULES:
            raise DataError(f"sentence_split must be one of {', '.join(SENTENCE_RULES)}, got "
                            f"{self.sentence_split!r}")
        if not 0 < self.validation_fraction < 1:
            raise DataError("validation_fraction must be between 0 and 1 (exclusive), got "
                            f"{self.validation_fraction}")
        threshold = self.near_dedup_threshold
        if threshold is not None and not 0 < threshold < 1:
            raise DataError(f"near_dedup_threshold must be between 0 and 1, got {threshold}")
        if self.sentinels < 0:
            raise DataError(f"sentinels must be 0 or more, got {self.sentinels}")
        if not self.trains_tokenizer and not Path(self.tokenizer).is_file():
            raise DataError(f"tokenizer {self.tokenizer!r} is neither a kind "
                            f"({', '.join(TOKENIZER_KINDS)}) nor a tokenizer.json file")
        if self.special_tokens is not None and self.trains_tokenizer:
            raise DataError("special_tokens name the roles of a reused tokenizer.json; a "
                            "trained tokenizer has lmlab's")
        if self.trains_tokenizer:
            reserved = len(SPECIAL_TOKENS) + self.sentinels
            if self.vocab_size <= reserved:
                raise DataError(f"vocab_size {self.vocab_size} leaves no room for ordinary "
                                f"tokens beside {reserved} special ones")
            token_dtype(self.vocab_size)  # a vocabulary too large for any shard is an error now

    @property
    def trains_tokenizer(self) -> bool:
        return self.tokenizer in TOKENIZER_KINDS

    def cleaning(self) -> CleaningConfig:
        near = self.near_dedup_threshold
        return CleaningConfig(
            normalisation=self.normalisation, strip_control=self.strip_control,
            exact_dedup=self.exact_dedup,
            near_dedup=NearDedupConfig(threshold=near, seed=self.seed) if near else None,
            quality=QualityThresholds() if self.quality_filter else None)

    def to_dict(self) -> dict:
        return {**asdict(self), "sources": list(self.sources)}


def make_recipe(file: Path | None = None, **values: Any) -> Recipe:
    """A Recipe from defaults, then a recipe file, then `values` (later ones win)."""
    from_file = read_recipe_file(Path(file)) if file is not None else {}
    merged = {**from_file, **values}
    _check_names(merged, "recipe field")
    if isinstance(merged.get("sources"), str):
        merged["sources"] = [merged["sources"]]
    return replace(Recipe(), **merged)


def read_recipe_file(path: Path) -> dict:
    values = read_settings(path, "recipe file")
    _check_names(values, f"field in {path}:")
    return values


def _check_names(values: dict, what: str) -> None:
    names = [f.name for f in fields(Recipe)]
    for name in values:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise DataError(f"unknown {what} {name!r}{hint}")
