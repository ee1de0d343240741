"""`prepare`: text documents → a dataset directory that training reads fast.

    DIR/tokenizer.json                    byte-level BPE with lmlab's special tokens
    DIR/{train,validation}.tokens.bin     token streams (see shards.py)
    DIR/{train,validation}.documents.npy
    DIR/meta.json                         versions, recipe, counts, bytes, tokens

Steps: Unicode NFC and control characters stripped; exact duplicates dropped; a
deterministic train/validation split from a hash of each document; the tokenizer trained on
the training split; documents encoded in parallel batches (the tokenizer's Rust threads) and
streamed to disk. The directory is built under a temporary name and renamed when complete,
so an interrupted run never leaves a directory that looks finished; re-running with the same
recipe reuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

import tokenizers
from tqdm import tqdm

from lmlab.data.errors import DataError
from lmlab.data.shards import TokenWriter
from lmlab.data.tokenizer import special_tokens_of, train_tokenizer

FORMAT_VERSION = 1
CHUNK_DOCUMENTS = 512
# Control characters except tab and newline (which carry layout).
CONTROL = dict.fromkeys(c for c in range(32) if c not in (9, 10)) | {127: None}


def normalise(text: str) -> str:
    return unicodedata.normalize("NFC", text).translate(CONTROL).strip()


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def in_validation(text_digest: bytes, fraction: float) -> bool:
    """Deterministic per document: its hash, read as a number in [0, 1), below `fraction`."""
    return int.from_bytes(text_digest[:8], "big") / 2**64 < fraction


def is_complete(directory: Path) -> bool:
    return (directory / "meta.json").is_file()


def _clean_and_split(documents: Iterable[str], work: Path, fraction: float) -> dict:
    """Pass 1: write cleaned, deduplicated documents per split as JSON lines."""
    seen: set[bytes] = set()
    counts = {"documents_in": 0, "empty": 0, "duplicates": 0, "train": 0, "validation": 0}
    size = {"train": 0, "validation": 0}
    files = {split: open(work / f"{split}.jsonl", "w") for split in size}  # noqa: SIM115
    try:
        for text in tqdm(documents, desc="clean", unit="doc"):
            counts["documents_in"] += 1
            text = normalise(text)
            if not text:
                counts["empty"] += 1
                continue
            key = digest(text)
            if key in seen:
                counts["duplicates"] += 1
                continue
            seen.add(key)
            split = "validation" if in_validation(key, fraction) else "train"
            files[split].write(json.dumps(text) + "\n")
            counts[split] += 1
            size[split] += len(text.encode("utf-8"))
    finally:
        for f in files.values():
            f.close()
    return {"counts": counts, "bytes": size}


def _read_jsonl(path: Path) -> Iterator[str]:
    with open(path) as f:
        for line in f:
            yield json.loads(line)


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def prepare(documents: Iterable[str], out: Path, vocab_size: int = 8192,
            validation_fraction: float = 0.05, recipe: dict | None = None) -> Path:
    """Build the dataset directory `out` from `documents` (strings); returns `out`."""
    out = Path(out)
    recipe = {"vocab_size": vocab_size, "validation_fraction": validation_fraction,
              "tokenizer": "byte-level-bpe", **(recipe or {})}
    if is_complete(out):
        if json.loads((out / "meta.json").read_text())["recipe"] == recipe:
            return out
        raise DataError(f"{out} holds a dataset prepared with another recipe; choose another "
                        "--out or delete it")
    if out.exists() and any(out.iterdir()):
        raise DataError(f"{out} holds something that is not an lmlab dataset")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        cleaned = _clean_and_split(documents, work, validation_fraction)
        if cleaned["counts"]["train"] == 0:
            raise DataError("the corpus is empty after cleaning: no document to train on")
        if cleaned["counts"]["validation"] == 0:
            raise DataError("no document fell in the validation split; add text or raise "
                            "the validation fraction")
        tokenizer = train_tokenizer(_read_jsonl(work / "train.jsonl"), vocab_size)
        tokenizer.save(str(work / "tokenizer.json"))
        special = special_tokens_of(tokenizer)
        splits = {}
        for split in ("train", "validation"):
            writer = TokenWriter(work, split, tokenizer.get_vocab_size())
            total = cleaned["counts"][split]
            with tqdm(total=total, desc=f"encode {split}", unit="doc") as bar:
                for chunk in _chunks(_read_jsonl(work / f"{split}.jsonl"), CHUNK_DOCUMENTS):
                    writer.add([e.ids for e in tokenizer.encode_batch(chunk)], special.eos)
                    bar.update(len(chunk))
            splits[split] = {**writer.close(), "bytes": cleaned["bytes"][split]}
            (work / f"{split}.jsonl").unlink()
        meta = {"format": FORMAT_VERSION, "recipe": recipe, "cleaning": cleaned["counts"],
                "splits": splits, "vocab_size": tokenizer.get_vocab_size(),
                "tokenizers_version": tokenizers.__version__}
        (work / "meta.json").write_text(json.dumps(meta, indent=2))
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out
