"""`prepare`: text sources → a dataset directory that training reads fast.

    DIR/tokenizer.json          trained here (bpe, wordpiece, unigram) or the one given, with
                                lmlab's special tokens and sentinels
    DIR/SPLIT.tokens.bin, SPLIT.documents.npy, SPLIT.sentences.npy   for train and validation
                                (see shards.py)
    DIR/meta.json               versions, the recipe, the input files, documents in and out of
                                every step, file hashes, token statistics
    DIR/stats.txt               the same counts and statistics, for people

Steps, each counted: read (readers.py: a bad record is skipped and counted, or fatal with
`strict`); clean (cleaning.py, near_dedup.py); mix weighted sources by up- or down-sampling
(mixing.py); split train and validation by a hash of each document; train or load the
tokenizer; encode in parallel batches (the tokenizer's Rust threads) and stream ids and
sentence offsets to disk.

Memory stays bounded: documents move in chunks, and all that grows per document is the
dedup digests. Weighted sources are cleaned one by one (a document repeated across sources
stays in each: the weights decide how much of each source to keep), and mixed afterwards, so
that deduplication never removes the copies up-sampling makes.

The tokenizer must see the training split before anything is encoded, and a mix needs every
source's count, so in those cases cleaned documents first go to a temporary file. With a
given tokenizer and no weights nothing is written twice: a background thread reads and
cleans while the encoder works.

The directory is built under a temporary name and renamed when complete, so an interrupted
run never leaves one that looks finished; re-running the same recipe on the same inputs
reuses it, and anything else in the way is refused.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tokenizers
from tokenizers import Tokenizer

from lmlab.atomic import make_directory, staging_directory
from lmlab.cache import only_one_process
from lmlab.data.cleaning import CleaningReport, split_of
from lmlab.data.errors import DataError
from lmlab.data.mixing import MixedSource, mix, parse_source, plan_mix, realised_shares
from lmlab.data.parallel import Workers, worker_count
from lmlab.data.readers import ReadStats, read_sources, source_files
from lmlab.data.recipe import Recipe, make_recipe
from lmlab.data.shards import TokenWriter, pack_documents
from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.split_check import checked_splits
from lmlab.data.stats import TokenStats, format_report, token_summary
from lmlab.data.streaming import Progress, chunked, in_background
from lmlab.data.tokenizer import load_tokenizer, special_tokens_of, train_tokenizer
from lmlab.version import __version__

if TYPE_CHECKING:
    from lmlab.data.datatrove_prepare import Engine

FORMAT_VERSION = 2  # 2: sentence offsets, recipe record, statistics
SPLITS = ("train", "validation")


@dataclass
class _Group:
    """Documents cleaned together: all sources (no weights), or one weighted source."""

    name: str
    documents: Callable[[ReadStats], Iterator[str]]
    weight: float | None = None


# ---------------------------------------------------------------- the Python API


def prepare(sources: Sequence[str] | str | None, out: str | Path, *,
            recipe_file: str | Path | None = None, workers: int | None = None,
            engine: Engine | None = None, **fields) -> Path:
    """`lmlab prepare SOURCE... --out DIR` in Python; returns the dataset directory.

    `sources` are files, directories or globs, each optionally `:WEIGHT`; None takes them
    from the recipe file, and none at all means the built-in corpus. Keyword arguments are
    Recipe fields (`tokenizer="wordpiece"`, `vocab_size=16000`, `near_dedup_threshold=None`).
    `workers` processes clean and encode side by side (parallel.py; the dataset is the same
    for any number); None: every core for inputs of a few MB or more. An `engine`
    (datatrove_prepare.Engine) runs the steps as a datatrove pipeline instead.
    """
    if sources is not None:
        fields["sources"] = [sources] if isinstance(sources, str | Path) else list(sources)
    recipe = make_recipe(recipe_file, **fields)
    if engine is not None:
        _check_engine_recipe(recipe)
    if not recipe.sources:
        from lmlab.data.builtin_corpus import builtin_documents

        group = _Group("builtin", lambda stats: _counted(builtin_documents(), stats))
        return _prepare([group], Path(out), recipe, [{"builtin": platform.python_version()}],
                        None, worker_count(workers, None))
    specs = [parse_source(source) for source in recipe.sources]
    files = [source_files(spec.pattern) for spec in specs]  # a missing path fails here
    weighted = [spec.weight is not None for spec in specs]
    if any(weighted) and not all(weighted):
        raise DataError("give every source a weight (corpus.jsonl:0.7), or none")

    def reader(patterns: list[str]) -> Callable[[ReadStats], Iterator[str]]:
        return lambda stats: read_sources(patterns, recipe.text_field,
                                          recipe.blank_line_documents, strict=recipe.strict,
                                          stats=stats)

    if all(weighted):
        groups = [_Group(spec.pattern, reader([spec.pattern]), spec.weight) for spec in specs]
    else:
        groups = [_Group("all sources", reader([spec.pattern for spec in specs]))]
    paths = [path for group in files for path in group]
    input_bytes = sum(p.stat().st_size for p in paths)
    if not recipe.trains_tokenizer:
        paths.append(Path(recipe.tokenizer))
    inputs = [{"path": str(p), "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
              for p in paths]
    if engine is not None:
        from lmlab.data.datatrove_prepare import prepare_with_datatrove

        return prepare_with_datatrove([spec.pattern for spec in specs], Path(out), recipe,
                                      inputs, engine)
    return _prepare(groups, Path(out), recipe, inputs, input_bytes,
                    worker_count(workers, input_bytes))


def _check_engine_recipe(recipe: Recipe) -> None:
    """What only the built-in engine does, refused before anything runs."""
    if not recipe.sources:
        raise DataError("--engine datatrove reads files: give SOURCE paths (the built-in "
                        "corpus is prepared without it)")
    if any(parse_source(source).weight is not None for source in recipe.sources):
        raise DataError("--engine datatrove does not mix weighted sources; drop the weights "
                        "or prepare without --engine")


def prepare_documents(documents: Iterable[str], out: str | Path, *,
                      recipe_file: str | Path | None = None, **fields) -> Path:
    """`prepare` for documents already in Python (strings). They are not fingerprinted: the
    directory is reused whenever the recipe matches."""
    recipe = make_recipe(recipe_file, **fields)
    if recipe.sources:
        raise DataError("give documents or sources, not both")
    group = _Group("documents", lambda stats: _counted(documents, stats))
    return _prepare([group], Path(out), recipe, [], None)


def is_complete(directory: Path) -> bool:
    return (Path(directory) / "meta.json").is_file()


def _counted(documents: Iterable[str], stats: ReadStats) -> Iterator[str]:
    for text in documents:
        stats.documents += 1
        yield text


# ---------------------------------------------------------------- the directory


def _prepare(groups: list[_Group], out: Path, recipe: Recipe, inputs: list[dict],
             input_bytes: int | None, workers: int = 1) -> Path:
    def build(work: Path) -> dict:
        with Workers(workers) as pool:
            return _build(groups, recipe, work, input_bytes, pool)

    return make_dataset(out, recipe, inputs, build)


def make_dataset(out: Path, recipe: Recipe, inputs: list[dict],
                 build: Callable[[Path], dict]) -> Path:
    """The dataset `out`: reused when complete and made from the same recipe and inputs, else
    built by `build(work)` (which writes its files into `work` and returns the rest of
    meta.json) and put in place."""
    make_directory(out.parent)
    # two runs started together on the built-in corpus: one prepares it, the other waits
    with only_one_process(out, f"waiting for another process preparing {out}"):
        if is_complete(out):  # made meanwhile by another process, or asked again
            _check_reusable(out, recipe, inputs)
            return out
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise DataError(f"{out} holds something that is not an lmlab dataset; choose "
                            "another --out or empty it")
        _remove_abandoned(out)
        return _build_into(out, recipe, inputs, build)


def _build_into(out: Path, recipe: Recipe, inputs: list[dict],
                build: Callable[[Path], dict]) -> Path:
    work = staging_directory(out, prefix=f"{_partial_prefix(out)}{os.getpid()}-")
    try:
        built = build(work)
        meta = {"format": FORMAT_VERSION, "versions": _versions(), "recipe": recipe.to_dict(),
                "inputs": inputs, **built}
        (work / "stats.txt").write_text(format_report(meta), encoding="utf-8")
        (work / "meta.json").write_text(json.dumps(meta, indent=2))  # last: marks it complete
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(work, out)
    except OSError as error:
        shutil.rmtree(work, ignore_errors=True)
        if error.filename is not None:
            raise
        # A failed write names no file (ENOSPC on a write call): say which dataset it was.
        raise OSError(error.errno, f"{error.strerror} while writing the dataset {out}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out


def _partial_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def _remove_abandoned(out: Path) -> None:
    """Remove the work directories of earlier runs for `out` whose process is gone (killed
    before it could clean up); those of running processes, this one's for other outputs
    included, are left alone."""
    prefix = _partial_prefix(out)
    for work in out.parent.glob(f"{glob.escape(prefix)}*"):
        owner = work.name.removeprefix(prefix).split("-")[0]
        if owner.isdigit() and not _is_running(int(owner)):
            shutil.rmtree(work, ignore_errors=True)


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _check_reusable(out: Path, recipe: Recipe, inputs: list[dict]) -> None:
    meta = json.loads((out / "meta.json").read_text())
    if meta.get("recipe") != recipe.to_dict():
        raise DataError(f"{out} holds a dataset prepared with another recipe; choose another "
                        "--out or delete it")
    if meta.get("inputs") != inputs:
        raise DataError(f"{out} was prepared from other versions of the input files; choose "
                        "another --out or delete it")


def _versions() -> dict:
    return {"lmlab": __version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


# ---------------------------------------------------------------- the steps


def _build(groups: list[_Group], recipe: Recipe, work: Path, input_bytes: int | None,
           workers: Workers) -> dict:
    reading = ReadStats()
    reports = [CleaningReport() for _ in groups]
    cleaned = checked_splits([_cleaned(group, recipe, reading, report, len(groups) > 1, workers)
                              for group, report in zip(groups, reports, strict=True)],
                             recipe.validation_fraction, recipe.blank_line_documents)
    weighted = groups[0].weight is not None
    plan = None
    if recipe.trains_tokenizer or weighted:
        tokenizer, chunks, plan, encode_bytes = _through_spills(groups, cleaned, recipe, work,
                                                                input_bytes)
    else:
        tokenizer = given_tokenizer(recipe)
        chunks = in_background(chunked(chain.from_iterable(cleaned)))
        encode_bytes = input_bytes
    splits, token_stats = encode_splits(chunks, tokenizer, recipe, work, encode_bytes, workers)
    for spill in work.glob("cleaned-*.jsonl"):
        spill.unlink()
    return {**dataset_record(work, recipe, tokenizer, splits, token_stats),
            "reading": reading_record(reading),
            "cleaning": _combined(reports).as_dict(),
            "cleaning_by_source": {g.name: r.as_dict() for g, r in zip(groups, reports,
                                                                       strict=True)}
            if weighted else None,
            "mix": _mix_report(plan) if weighted else None}


def reading_record(reading: ReadStats) -> dict:
    return {"files": reading.files, "documents": reading.documents,
            "invalid_utf8_documents": reading.invalid_utf8_documents,
            "invalid_utf8_bytes": reading.invalid_utf8_bytes, "skipped": dict(reading.skipped)}


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


def _through_spills(groups: list[_Group], cleaned: list[Iterator[str]], recipe: Recipe,
                    work: Path, input_bytes: int | None
                    ) -> tuple[Tokenizer, Iterator[list[str]], list[MixedSource], float]:
    """Clean every group into a temporary file, then train the tokenizer (if asked) on the
    mix's training split: (tokenizer, chunks of the mix to encode, the mix plan, its bytes)."""
    spills, counts, spilled_bytes = [], {}, 0
    with Progress("read and clean", input_bytes) as progress:
        for index, (group, documents) in enumerate(zip(groups, cleaned, strict=True)):
            spills.append(work / f"cleaned-{index}.jsonl")
            counts[group.name], size = _spill(documents, spills[-1], progress)
            spilled_bytes += size
    weighted = groups[0].weight is not None
    plan = plan_mix(counts, {g.name: g.weight for g in groups} if weighted else None)

    def mixed(plan: list[MixedSource]) -> Iterator[str]:
        return mix([_read_spill(path) for path in spills], plan, recipe.seed)

    if recipe.trains_tokenizer:
        tokenizer = train_on(mixed(_fresh(plan)), recipe, spilled_bytes)
    else:
        tokenizer = given_tokenizer(recipe)
    mixed_bytes = spilled_bytes * sum(s.multiplier * s.documents for s in plan) / \
        sum(counts.values())
    return tokenizer, chunked(mixed(plan)), plan, mixed_bytes


def _cleaned(group: _Group, recipe: Recipe, reading: ReadStats, report: CleaningReport,
             name_it: bool, workers: Workers) -> Iterator[str]:
    try:
        yield from workers.clean(group.documents(reading), recipe.cleaning(), report)
    except DataError as error:
        if not name_it:
            raise
        raise DataError(f"{group.name}: {error}") from None


def _spill(documents: Iterable[str], path: Path, progress: Progress) -> tuple[int, int]:
    """Write cleaned documents as JSON lines; (documents, UTF-8 bytes of their text)."""
    count = size = 0
    with open(path, "w", encoding="utf-8") as f:
        for chunk in chunked(documents):
            chunk_bytes = sum(len(text.encode("utf-8")) for text in chunk)
            f.writelines(json.dumps(text, ensure_ascii=False) + "\n" for text in chunk)
            count, size = count + len(chunk), size + chunk_bytes
            progress.update(len(chunk), chunk_bytes)
    return count, size


def _read_spill(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _fresh(plan: list[MixedSource]) -> list[MixedSource]:
    """The plan with its counters at zero, for another pass over the mix."""
    return [replace(s, documents_in=0, documents_out=0) for s in plan]


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


def _combined(reports: list[CleaningReport]) -> CleaningReport:
    total = CleaningReport()
    for report in reports:
        for f in fields(CleaningReport):
            setattr(total, f.name, getattr(total, f.name) + getattr(report, f.name))
    return total


def _mix_report(plan: list[MixedSource]) -> list[dict]:
    realised = realised_shares(plan)
    return [{"source": s.name, "requested_share": s.share, "realised_share": realised[s.name],
             "multiplier": s.multiplier, "documents_in": s.documents_in,
             "documents_out": s.documents_out} for s in plan]
