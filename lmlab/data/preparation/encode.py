"""What both engines share: the tokenizer (trained on the training split, or the one given),
encoding documents into both splits' shards, and meta.json's records of the tokenizer, the
splits and the reading."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from lmlab.data.errors import DataError
from lmlab.data.preparation.cleaning import split_of
from lmlab.data.preparation.parallel import Workers
from lmlab.data.preparation.recipe import Recipe
from lmlab.data.preparation.stats import TokenStats, token_summary
from lmlab.data.preparation.streaming import Progress, chunked
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.shards import TokenWriter, pack_documents
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.text.readers import ReadStats
from lmlab.data.tokenizer import load_tokenizer, special_tokens_of

SPLITS = ("train", "validation")


def train_on(documents: Iterable[str], recipe: Recipe, total_bytes: int) -> Tokenizer:
    def training_split(progress: Progress) -> Iterator[str]:
        for chunk in chunked(documents):
            progress.update(len(chunk), sum(len(t.encode("utf-8")) for t in chunk))
            yield from (t for t in chunk if split_of(t, recipe.validation_fraction) == "train")

    with Progress(f"train {recipe.tokenizer} tokenizer", total_bytes) as progress:
        return train_tokenizer(training_split(progress), recipe.vocab_size, recipe.sentinels,
                               recipe.tokenizer)


def given_tokenizer(recipe: Recipe) -> Tokenizer:
    return load_tokenizer(Path(recipe.tokenizer), recipe.sentinels, recipe.special_tokens)


def document_end(special: SpecialTokens) -> int:
    """The token each document ends with: [EOS], else (BERT's tokenizers have none) [SEP]."""
    ends = special.present("eos", "sep")
    if not ends:
        raise DataError("the tokenizer has neither an end-of-text nor a separator token to end "
                        "each document with")
    return ends[0]


def encode_splits(chunks: Iterable[list[str]], tokenizer: Tokenizer, recipe: Recipe, work: Path,
                  total_bytes: float | None, workers: Workers) -> tuple[dict, list[TokenStats]]:
    """Encode chunk by chunk (by `workers`) into both splits; each document's split from its
    hash."""
    end = document_end(special_tokens_of(tokenizer, names=recipe.special_tokens))
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    writers = {split: TokenWriter(work, split, vocab_size) for split in SPLITS}
    stats = {split: TokenStats(vocab_size) for split in SPLITS}
    sizes = dict.fromkeys(SPLITS, 0)
    with Progress("encode", int(total_bytes) if total_bytes else None) as progress:
        for encoded in workers.encoded(chunks, tokenizer, recipe.validation_fraction,
                                       recipe.sentence_split):
            for split in SPLITS:
                documents = [document for document in encoded if document.split == split]
                if documents:
                    sizes[split] += sum(document.size for document in documents)
                    flat = pack_documents([d.ids for d in documents], end,
                                          writers[split].dtype)
                    lengths = np.fromiter((len(d.ids) + 1 for d in documents), np.int64,
                                          len(documents))
                    writers[split].add(flat, lengths, [d.starts for d in documents])
                    stats[split].add(flat, lengths)
            progress.update(len(encoded), sum(document.size for document in encoded))
    splits = {split: {**writers[split].close(), "bytes": sizes[split]} for split in SPLITS}
    return splits, list(stats.values())


def dataset_record(work: Path, recipe: Recipe, tokenizer: Tokenizer, splits: dict,
                   token_stats: list[TokenStats]) -> dict:
    """Save the tokenizer beside the encoded splits in `work`; meta.json's record of both.
    Either split empty is an error: training needs both."""
    tokenizer.save(str(work / "tokenizer.json"))
    for split in SPLITS:
        if splits[split]["documents"] == 0:
            total = sum(splits[name]["documents"] for name in SPLITS)
            raise DataError(f"no document fell in the {split} split ({total:,} documents in "
                            f"all, validation fraction {recipe.validation_fraction}); add "
                            "documents or change --validation-fraction")
    special = special_tokens_of(tokenizer, names=recipe.special_tokens)
    return {
        "splits": splits,
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "tokenizer": {"kind": recipe.tokenizer if recipe.trains_tokenizer else "given",
                      "sentinels": len(special.sentinels),
                      "special_tokens": recipe.special_tokens},
        "stats": token_summary(token_stats, tokenizer, {document_end(special)}),
    }


def reading_record(reading: ReadStats) -> dict:
    return {"files": reading.files, "documents": reading.documents,
            "invalid_utf8_documents": reading.invalid_utf8_documents,
            "invalid_utf8_bytes": reading.invalid_utf8_bytes, "skipped": dict(reading.skipped)}
