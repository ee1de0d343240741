"""`lmlab prepare --engine datatrove`: the same steps as preparation.py, as datatrove pipeline
stages that its executors spread over tasks: processes here (local) or a Ray cluster (ray).

    read and clean   N tasks  lmlab's readers and cleaning.examine: normalisation, control
                              characters, empty documents, the quality rules
    exact dedup      datatrove's ExactDedup stages (signature, find, filter)
    near dedup       datatrove's MinHash stages (signature, buckets, clusters, filter), with
                     lmlab's n-gram size, LSH bands for the threshold, and words (str.split)
    tokenizer        1 task, when the recipe trains one: on the kept training split
    encode           N tasks, each into its own part of the dataset (lmlab's shards)
    merge            here: the parts end to end, then meta.json and stats.txt as preparation.py

Stages work in WORK = .OUT.datatrove beside the dataset, on storage every task can reach.
datatrove marks each finished task there, so running the same command again after an
interruption redoes only the unfinished tasks; WORK is removed once the dataset is in place.

The dataset holds the documents the built-in path keeps, except where the two dedups decide
differently: datatrove drops every document of a MinHash cluster but one (the built-in path
only those that match a document it kept), and puts documents of fewer words than the n-gram
size in no cluster. Documents come in task order, not input order.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lmlab.data.cleaning import CleaningReport
from lmlab.data.datatrove_quiet import datatrove_logs_in, local_executor
from lmlab.data.datatrove_steps import (
    PARTS,
    TOKENIZER,
    EncodeShards,
    Examine,
    ReadRankFile,
    ReadSources,
    Tally,
    TrainTokenizer,
    WhitespaceWords,
    read_counts,
    summed,
)
from lmlab.data.errors import DataError
from lmlab.data.near_dedup import lsh_bands
from lmlab.data.preparation import (
    SPLITS,
    dataset_record,
    given_tokenizer,
    make_dataset,
    reading_record,
)
from lmlab.data.readers import ReadStats
from lmlab.data.recipe import Recipe
from lmlab.data.shards import TokenWriter
from lmlab.data.stats import TokenStats

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Engine:
    """Where the stages run: `executor` with `tasks` tasks per parallel stage (None: one per
    core of this machine, or of the Ray cluster)."""

    executor: str = "local"
    tasks: int | None = None
    verbose: bool = False  # datatrove's own output too (else in WORK/logs, datatrove_quiet.py)

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise DataError(f"executor must be one of {', '.join(EXECUTORS)}, "
                            f"got {self.executor!r}")
        if self.tasks is not None and self.tasks < 1:
            raise DataError(f"tasks must be at least 1, got {self.tasks}")

    def task_count(self) -> int:
        """`tasks`, or the CPUs of the Ray cluster (joined here) or of this machine."""
        if self.executor == "ray":
            import ray

            _connect_ray()
            return self.tasks or int(ray.cluster_resources().get("CPU", 1))
        return self.tasks or len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Stage:
    name: str
    pipeline: list
    tasks: int
    check: Callable[[str], object] | None = None  # of the work folder, once the stage is done


class StageUnfinished(DataError):
    """Tasks of a stage failed or did not run: the work folder stays, to resume from."""


def prepare_with_datatrove(sources: list[str], out: Path, recipe: Recipe, inputs: list[dict],
                           engine: Engine) -> Path:
    # absolute: a task on a cluster node starts in that node's working directory, not ours
    out = out.absolute()
    sources = [str(Path(source).absolute()) for source in sources]
    work = out.parent / f".{out.name}.datatrove"
    try:
        with datatrove_logs_in(work / "logs" / "lmlab.log", engine.verbose):
            dataset = make_dataset(out, recipe, inputs, lambda staging: _run(
                sources, recipe, inputs, engine, work, staging))
    except StageUnfinished:
        raise
    except DataError:  # the input's fault: nothing in the work folder can be reused
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return dataset


def _run(sources: list[str], recipe: Recipe, inputs: list[dict], engine: Engine, work: Path,
         staging: Path) -> dict:
    tasks = engine.task_count()  # joins the Ray cluster first: a bad address leaves nothing
    _claim(work, {"recipe": recipe.to_dict(), "inputs": inputs, "executor": engine.executor,
                  "tasks": tasks})
    if not recipe.trains_tokenizer:
        given_tokenizer(recipe).save(str(work / TOKENIZER))
    stages = _stages(sources, recipe, str(work), tasks)
    for number, stage in enumerate(stages, 1):
        logs = work / "logs" / f"{number:02d}"
        executor = _executor(engine, stage, logs)
        done = stage.tasks - len(executor.get_incomplete_ranks())
        print(f"stage {number}/{len(stages)}: {stage.name} ({stage.tasks} "
              f"task{'s' if stage.tasks > 1 else ''}"
              f"{f', {done} done before' if done else ''})", flush=True)
        try:
            executor.run()
        except DataError:  # the input's fault (a bad record with --strict, say), as it is
            raise
        except Exception as error:  # a task's own error, raised again by the executor
            raise StageUnfinished(f"stage '{stage.name}' failed: {error} (the tasks' logs are "
                                  f"in {logs}/logs); run the same command again to "
                                  "continue") from None
        if left := executor.get_incomplete_ranks():
            raise StageUnfinished(f"{len(left)} of {stage.tasks} tasks of stage "
                                  f"'{stage.name}' did not finish (their logs are in "
                                  f"{logs}/logs); run the same command again to continue")
        if stage.check:
            stage.check(str(work))
    return {**_merge(str(work), recipe, staging),
            "engine": {"name": "datatrove", "version": _datatrove_version(),
                       "executor": engine.executor, "tasks": tasks}}


def _claim(work: Path, settings: dict) -> None:
    """Continue the work in WORK when the same command started it; else start afresh (what
    another recipe, other inputs or another task count made cannot be reused)."""
    path = work / "settings.json"
    settings = json.loads(json.dumps(settings))  # as read back
    if path.is_file():
        before = json.loads(path.read_text())
        if before == settings:
            return
        changed = sorted(k for k in settings if settings[k] != before.get(k))
        print(f"starting afresh: {work} holds an interrupted prepare with other "
              f"{', '.join(changed)}", flush=True)
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))


def _stages(sources: list[str], recipe: Recipe, work: str, tasks: int) -> list[Stage]:
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    def writer(folder: str) -> JsonlWriter:
        return JsonlWriter(f"{work}/{folder}", output_filename="${rank}.jsonl.gz")

    cleaning = recipe.cleaning()
    stages: list[Stage] = []
    # the stage that writes `stream`, the documents so far; each dedup appends its signature
    # step to it, then reads `stream` again, in the same order, to drop what it found
    writing = Stage("read and clean", [ReadSources(sources, recipe, work),
                                       Examine(cleaning, work), writer("cleaned")], tasks,
                    lambda work: _check_read(work, sources))
    stream = "cleaned"

    def dedup(label: str, signature, finding: list[Stage], drop) -> None:
        nonlocal writing, stream
        writing.pipeline.append(signature)
        stages.extend([writing, *finding])
        writing = Stage(f"{label} dedup: drop", [ReadRankFile(f"{work}/{stream}"), drop,
                                                 Tally(label, work), writer(f"{label}-kept")],
                        tasks)
        stream = f"{label}-kept"

    if cleaning.exact_dedup:
        exact = ExactDedupConfig(content_getter=_text)
        dedup("exact", ExactDedupSignature(f"{work}/exact-signatures", exact, tasks),
              [Stage("exact dedup: find", [ExactFindDedups(
                  f"{work}/exact-signatures", f"{work}/exact-duplicates", exact)], tasks)],
              ExactDedupFilter(f"{work}/exact-duplicates", exact))
    if cleaning.near_dedup:
        near = cleaning.near_dedup
        bands, rows = lsh_bands(near.threshold, near.num_permutations)
        # sha1: datatrove's default xxhash is handed str, which xxhash 4 refuses; no text
        # normalisation: shingles of the cleaned text's words, as lmlab's own near dedup
        minhash = MinhashConfig(n_grams=near.shingle_words, num_buckets=bands,
                                hashes_per_bucket=rows, seed=near.seed,
                                hash_config=HashConfig(hash_fc="sha1"),
                                norm_config=TextNormConfig(
                                    lowercase=False, norm_whitespace=False,
                                    remove_punctuation=False, norm_unicode_diacritics=False,
                                    norm_numbers=False))
        dedup("near", MinhashDedupSignature(f"{work}/minhash-signatures", minhash,
                                            language=WhitespaceWords()),
              [Stage("near dedup: buckets", [MinhashDedupBuckets(
                  f"{work}/minhash-signatures", f"{work}/minhash-buckets", config=minhash)],
                  bands),
               Stage("near dedup: clusters", [MinhashDedupCluster(
                   f"{work}/minhash-buckets", f"{work}/minhash-clusters", config=minhash)], 1)],
              MinhashDedupFilter(f"{work}/minhash-clusters"))
    stages.append(replace(writing, check=_cleaning))  # nothing left is an error before training
    if recipe.trains_tokenizer:
        stages.append(Stage(f"train {recipe.tokenizer} tokenizer",
                            [TrainTokenizer(recipe, f"{work}/{stream}", work)], 1))
    stages.append(Stage("encode", [ReadRankFile(f"{work}/{stream}"),
                                   EncodeShards(recipe, work)], tasks))
    return stages


def _text(document) -> bytes:
    return document.text.encode("utf-8")


def _executor(engine: Engine, stage: Stage, logs: Path):
    if engine.executor == "local":
        return local_executor(engine.verbose)(stage.pipeline, tasks=stage.tasks,
                                     workers=min(stage.tasks, len(os.sched_getaffinity(0))),
                                     logging_dir=str(logs))
    if engine.executor == "ray":
        from datatrove.executor.ray import RayPipelineExecutor

        _connect_ray()
        return RayPipelineExecutor(stage.pipeline, tasks=stage.tasks, logging_dir=str(logs),
                                   cpus_per_task=1)


def _connect_ray() -> None:
    import ray

    from lmlab.ray_cluster import connect

    if ray.is_initialized():
        return
    try:
        connect("--executor ray", log_to_driver=False)  # the tasks log to their own files
    except ConnectionError as error:  # not a failed write of the dataset (an OSError too)
        raise DataError(str(error)) from None


def _check_read(work: str, sources: list[str]) -> None:
    if summed(read_counts(work, "read")).get("documents", 0) == 0:
        raise DataError(f"{' '.join(sources)}: the corpus is empty (no documents)")


def _merge(work: str, recipe: Recipe, staging: Path) -> dict:
    """The tasks' parts end to end in `staging`, and the rest of meta.json."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{work}/{TOKENIZER}")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    parts = sorted((Path(work) / PARTS).iterdir())
    splits, token_stats = {}, []
    for split in SPLITS:
        writer = TokenWriter(staging, split, vocab_size)
        stats = TokenStats(vocab_size)
        for part in parts:
            writer.add_part(part)
            with np.load(part / "stats.npz") as saved:
                stats.frequencies += saved[f"{split}_frequencies"]
                stats.length_buckets += saved[f"{split}_length_buckets"]
        size = sum(json.loads((part / "splits.json").read_text())[split]["bytes"]
                   for part in parts)
        splits[split] = {**writer.close(), "bytes": size}
        token_stats.append(stats)
    return {**dataset_record(staging, recipe, tokenizer, splits, token_stats),
            "reading": _reading(work), "cleaning": _cleaning(work).as_dict(),
            "cleaning_by_source": None, "mix": None}


def _reading(work: str) -> dict:
    read = summed(read_counts(work, "read"))
    return reading_record(ReadStats(**{**read, "skipped": Counter(read.get("skipped", {}))}))


def _cleaning(work: str) -> CleaningReport:
    examined = summed(read_counts(work, "examine"))
    report = CleaningReport(**{**examined,
                               "quality_rejected": Counter(examined["quality_rejected"])})
    admitted = report.documents_in - report.empty - sum(report.quality_rejected.values())
    exact = summed(read_counts(work, "exact")).get("documents", admitted)
    near = summed(read_counts(work, "near")).get("documents", exact)
    report.exact_duplicates, report.near_duplicates = admitted - exact, exact - near
    report.documents_out = near
    if near == 0:
        raise DataError(f"no documents left after cleaning ({report.documents_in} in)")
    return report


def _datatrove_version() -> str:
    from importlib.metadata import version

    return version("datatrove")
