"""The ways in: `prepare` (sources, or the built-in corpus, through an engine),
`prepare_documents` (strings already in Python), and `open_or_prepare` (the dataset training
asked for, or the built-in corpus, prepared on first use)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from lmlab.cache import cache_dir
from lmlab.data.dataset import Dataset, open_dataset
from lmlab.data.errors import DataError
from lmlab.data.preparation.builtin import (
    prepare_builtin_corpus,
    prepare_sources,
    prepare_texts,
)
from lmlab.data.preparation.datatrove import Engine, check_engine_recipe, prepare_with_datatrove
from lmlab.data.preparation.directory import is_complete
from lmlab.data.preparation.mixing import parse_source
from lmlab.data.preparation.recipe import Recipe, make_recipe
from lmlab.data.text.readers import source_files

__all__ = ["open_or_prepare", "prepare", "prepare_documents"]


def prepare(sources: Sequence[str] | str | None, out: str | Path, *,
            recipe_file: str | Path | None = None, workers: int | None = None,
            engine: Engine | None = None, **fields) -> Path:
    """`lmlab prepare SOURCE... --out DIR` in Python; returns the dataset directory.

    `sources` are files, directories or globs, each optionally `:WEIGHT`; None takes them
    from the recipe file, and none at all means the built-in corpus. Keyword arguments are
    Recipe fields (`tokenizer="wordpiece"`, `vocab_size=16000`, `near_dedup_threshold=None`).
    `workers` processes clean and encode side by side (parallel.py; the dataset is the same
    for any number); None: every core for inputs of a few MB or more. An `engine` runs the
    steps as a datatrove pipeline instead.
    """
    if sources is not None:
        fields["sources"] = [sources] if isinstance(sources, str | Path) else list(sources)
    recipe = make_recipe(recipe_file, **fields)
    if engine is not None:
        check_engine_recipe(recipe)
    if not recipe.sources:
        return prepare_builtin_corpus(Path(out), recipe, workers)
    specs = [parse_source(source) for source in recipe.sources]
    files = [source_files(spec.pattern) for spec in specs]  # a missing path fails here
    weighted = [spec.weight is not None for spec in specs]
    if any(weighted) and not all(weighted):
        raise DataError("give every source a weight (corpus.jsonl:0.7), or none")
    paths = [path for group in files for path in group]
    input_bytes = sum(p.stat().st_size for p in paths)
    inputs = _inputs(paths, recipe)
    if engine is not None:
        return prepare_with_datatrove([spec.pattern for spec in specs], Path(out), recipe,
                                      inputs, engine)
    return prepare_sources(specs, Path(out), recipe, inputs, input_bytes, workers)


def _inputs(paths: list[Path], recipe: Recipe) -> list[dict]:
    """meta.json's fingerprint of the input files (and of the tokenizer given)."""
    if not recipe.trains_tokenizer:
        paths = [*paths, Path(recipe.tokenizer)]
    return [{"path": str(p), "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
            for p in paths]


def prepare_documents(documents: Iterable[str], out: str | Path, *,
                      recipe_file: str | Path | None = None, **fields) -> Path:
    """`prepare` for documents already in Python (strings). They are not fingerprinted: the
    directory is reused whenever the recipe matches."""
    recipe = make_recipe(recipe_file, **fields)
    if recipe.sources:
        raise DataError("give documents or sources, not both")
    return prepare_texts(documents, Path(out), recipe)


BUILTIN_DATASET = "builtin-bpe-8192-v2"  # the name changes with the dataset format


def builtin_dataset_dir() -> Path:
    return cache_dir() / "datasets" / BUILTIN_DATASET


def open_or_prepare(path: str | None) -> Dataset:
    """The dataset at `path`; with none, the built-in corpus, prepared on first use."""
    if path is not None:
        return open_dataset(Path(path))
    directory = builtin_dataset_dir()
    if not is_complete(directory):
        print(f"preparing the built-in corpus in {directory} (once)")
        prepare((), directory)
    return open_dataset(directory)
