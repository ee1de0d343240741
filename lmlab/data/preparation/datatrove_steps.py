"""lmlab's own steps for a datatrove pipeline (datatrove.py runs them).

Each step does one task's share (`rank` of `world_size`) and leaves what it counted in the
work folder (datatrove_work.py), which the driver sums into meta.json.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.word_tokenizers import WordTokenizer
from tokenizers import Tokenizer

from lmlab.data.preparation.cleaning import Cleaner, CleaningConfig, CleaningReport, examine
from lmlab.data.preparation.datatrove_work import PARTS, TOKENIZER, write_counts
from lmlab.data.preparation.encode import encode_splits, train_on
from lmlab.data.preparation.parallel import Workers
from lmlab.data.preparation.recipe import Recipe
from lmlab.data.preparation.streaming import chunked
from lmlab.data.text.readers import ReadOptions, ReadStats, expand_sources, read_file


class ReadSources(PipelineStep):
    """The task's share of the input documents: whole files when there are at least as many
    files as tasks, else every `world_size`-th document of the input, counted across files
    (each task reads them all, and keeps its own)."""

    name = "lmlab read"
    type = "📖 - READER"

    def __init__(self, sources: list[str], recipe: Recipe, work: str):
        super().__init__()
        self.sources, self.work = sources, work
        self.options = ReadOptions(recipe.text_field, recipe.blank_line_documents, recipe.strict)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        files = expand_sources(self.sources)
        by_file = len(files) >= world_size
        stats = ReadStats()
        index = 0
        for path in files[rank::world_size] if by_file else files:
            for text in read_file(path, self.options, stats):
                if by_file or index % world_size == rank:
                    self.stat_update("documents")
                    yield Document(text=text, id=f"{rank}/{index}")
                index += 1
        counts = {**asdict(stats), "skipped": dict(stats.skipped)}
        if not by_file and rank > 0:  # every task read every file: rank 0 counts the files
            counts = {"documents": 0}
        if not by_file:
            counts["documents"] = len(range(rank, index, world_size))
        write_counts(self.work, "read", rank, counts)


class Examine(PipelineStep):
    """The cleaning that needs no other document (cleaning.examine): normalisation, control
    characters, empty documents and the quality rules. A document leaves with its cleaned
    text or not at all."""

    name = "lmlab examine"
    type = "🔻 - FILTER"

    def __init__(self, config: CleaningConfig, work: str):
        super().__init__()
        # no dedup here: datatrove's stages find exact and near copies
        self.config, self.work = replace(config, exact_dedup=False, near_dedup=None), work

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        report = CleaningReport()
        counter = Cleaner(self.config, report)  # counts what examine decided
        for document in data:
            examined = examine(document.text, self.config)
            if counter.admit(examined):
                document.text = examined.text
                yield document
        write_counts(self.work, "examine", rank,
                     {**asdict(report), "quality_rejected": dict(report.quality_rejected)})


class Tally(PipelineStep):
    """Counts the documents that reach it (after a dedup filter: the ones it kept)."""

    name = "lmlab tally"
    type = "📊 - STATS"

    def __init__(self, label: str, work: str):
        super().__init__()
        self.label, self.work = label, work

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        count = 0
        for document in data:
            count += 1
            yield document
        write_counts(self.work, self.label, rank, {"documents": count})


class ReadRankFile(PipelineStep):
    """The documents an earlier stage's task of the same rank wrote (datatrove's JsonlWriter,
    `RANK.jsonl.gz`), in their order: dedup filters find documents by their position."""

    name = "lmlab read stage"
    type = "📖 - READER"

    def __init__(self, folder: str):
        super().__init__()
        self.folder = folder

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        yield from read_rank_file(Path(self.folder) / f"{rank:05d}.jsonl.gz")


def read_rank_file(path: Path) -> Iterator[Document]:
    if not path.is_file():  # the task kept nothing: its writer made no file
        return
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            yield Document(text=record["text"], id=record["id"])


class TrainTokenizer(PipelineStep):
    """One task: train the recipe's tokenizer on the training split of every kept document."""

    name = "lmlab train tokenizer"
    type = "🔢 - TOKENIZER"

    def __init__(self, recipe: Recipe, kept: str, work: str):
        super().__init__()
        self.recipe, self.kept, self.work = recipe, kept, work

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        files = sorted(Path(self.kept).glob("*.jsonl.gz"))
        texts = (document.text for path in files for document in read_rank_file(path))
        size = sum(path.stat().st_size for path in files)  # compressed: the bar is a guide
        train_on(texts, self.recipe, size).save(str(Path(self.work) / TOKENIZER))


class EncodeShards(PipelineStep):
    """The task's documents encoded into its own part of the dataset (PARTS/RANK: the same
    files as the dataset's, see shards.py), with its token statistics."""

    name = "lmlab encode"
    type = "🔢 - TOKENIZER"

    def __init__(self, recipe: Recipe, work: str):
        super().__init__()
        self.recipe, self.work = recipe, work

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1
            ) -> DocumentsPipeline:
        part = Path(self.work) / PARTS / f"{rank:05d}"
        part.mkdir(parents=True, exist_ok=True)
        tokenizer = Tokenizer.from_file(str(Path(self.work) / TOKENIZER))
        texts = (document.text for document in data)
        with Workers(1) as here:
            splits, stats = encode_splits(chunked(texts), tokenizer, self.recipe, part, None,
                                          here)
        np.savez(part / "stats.npz", **{f"{s}_{name}": getattr(stats[i], name)
                                        for i, s in enumerate(splits)
                                        for name in ("frequencies", "length_buckets")})
        (part / "splits.json").write_text(json.dumps(splits))


class WhitespaceWords(WordTokenizer):
    """Words as lmlab's own near dedup takes them (str.split), instead of datatrove's language
    tokenizers (spaCy for English, a heavy dependency)."""

    def __init__(self):
        super().__init__("whitespace")

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]
