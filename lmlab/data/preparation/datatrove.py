"""`lmlab prepare --engine datatrove`: the same steps as the built-in engine, as datatrove pipeline
stages that its executors spread over tasks: processes here (local) or a Ray cluster (ray).

    read and clean   N tasks  lmlab's readers and cleaning.examine: normalisation, control
                              characters, empty documents, the quality rules
    exact dedup      datatrove's ExactDedup stages (signature, find, filter)
    near dedup       datatrove's MinHash stages (signature, buckets, clusters, filter), with
                     lmlab's n-gram size, LSH bands for the threshold, and words (str.split)
    tokenizer        1 task, when the recipe trains one: on the kept training split
    encode           N tasks, each into its own part of the dataset (lmlab's shards)
    merge            here: the parts end to end, then meta.json and stats.txt as builtin.py

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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from lmlab.data.errors import DataError
from lmlab.data.preparation.cleaning import CleaningConfig
from lmlab.data.preparation.datatrove_work import TOKENIZER, check_read, cleaning, merge
from lmlab.data.preparation.directory import make_dataset
from lmlab.data.preparation.encode import given_tokenizer
from lmlab.data.preparation.mixing import parse_source
from lmlab.data.preparation.near_dedup import NearDedupConfig, lsh_bands
from lmlab.data.preparation.recipe import Recipe
from lmlab.ray_cluster import connect

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


def check_engine_recipe(recipe: Recipe) -> None:
    """What only the built-in engine does, refused before anything runs."""
    if not recipe.sources:
        raise DataError("--engine datatrove reads files: give SOURCE paths (the built-in "
                        "corpus is prepared without it)")
    if any(parse_source(source).weight is not None for source in recipe.sources):
        raise DataError("--engine datatrove does not mix weighted sources; drop the weights "
                        "or prepare without --engine")


def prepare_with_datatrove(sources: list[str], out: Path, recipe: Recipe, inputs: list[dict],
                           engine: Engine) -> Path:
    # absolute: a task on a cluster node starts in that node's working directory, not ours
    out = out.absolute()
    sources = [str(Path(source).absolute()) for source in sources]
    work = out.parent / f".{out.name}.datatrove"
    from lmlab.data.preparation.datatrove_quiet import datatrove_logs_in

    try:
        with datatrove_logs_in(work / "logs" / "main.log", engine.verbose):
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
    return {**merge(str(work), recipe, staging),
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
    """The pipeline's stages in order. The stage that writes `stream` (the documents so far)
    takes each dedup's signature step; the dedup's drop stage reads `stream` again, in the
    same order, to drop what it found."""
    from lmlab.data.preparation.datatrove_steps import ReadRankFile, Tally

    config = recipe.cleaning()
    stages, stream = [], "cleaned"
    writing = _read_and_clean(sources, recipe, work, tasks)
    for dedup in (_exact_dedup(config, work, tasks), _near_dedup(config, work)):
        if dedup is None:
            continue
        writing.pipeline.append(dedup.signature)
        stages.extend([writing, *dedup.finding])
        writing = Stage(f"{dedup.label} dedup: drop",
                        [ReadRankFile(f"{work}/{stream}"), dedup.drop, Tally(dedup.label, work),
                         _writer(work, f"{dedup.label}-kept")], tasks)
        stream = f"{dedup.label}-kept"
    stages.append(replace(writing, check=cleaning))  # nothing left is an error before training
    if recipe.trains_tokenizer:
        stages.append(_tokenizer(recipe, work, stream))
    stages.append(_encode(recipe, work, stream, tasks))
    return stages


@dataclass(frozen=True)
class _Dedup:
    label: str
    signature: object  # the step appended to the stage that writes the documents
    finding: list[Stage]
    drop: object  # the filter that drops what `finding` found


def _writer(work: str, folder: str):
    from datatrove.pipeline.writers import JsonlWriter

    return JsonlWriter(f"{work}/{folder}", output_filename="${rank}.jsonl.gz")


def _read_and_clean(sources: list[str], recipe: Recipe, work: str, tasks: int) -> Stage:
    from lmlab.data.preparation.datatrove_steps import Examine, ReadSources

    return Stage("read and clean", [ReadSources(sources, recipe, work),
                                    Examine(recipe.cleaning(), work), _writer(work, "cleaned")],
                 tasks, lambda work: check_read(work, sources))


def _exact_dedup(config: CleaningConfig, work: str, tasks: int) -> _Dedup | None:
    from datatrove.pipeline.dedup.exact_dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
    )

    if not config.exact_dedup:
        return None
    exact = ExactDedupConfig(content_getter=_text)
    find = ExactFindDedups(f"{work}/exact-signatures", f"{work}/exact-duplicates", exact)
    return _Dedup("exact", ExactDedupSignature(f"{work}/exact-signatures", exact, tasks),
                  [Stage("exact dedup: find", [find], tasks)],
                  ExactDedupFilter(f"{work}/exact-duplicates", exact))


def _near_dedup(config: CleaningConfig, work: str) -> _Dedup | None:
    from datatrove.pipeline.dedup.minhash import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )

    from lmlab.data.preparation.datatrove_steps import WhitespaceWords
    if not config.near_dedup:
        return None
    minhash, bands = _minhash_config(config.near_dedup)
    signatures, buckets = f"{work}/minhash-signatures", f"{work}/minhash-buckets"
    clusters = f"{work}/minhash-clusters"
    return _Dedup(
        "near", MinhashDedupSignature(signatures, minhash, language=WhitespaceWords()),
        [Stage("near dedup: buckets", [MinhashDedupBuckets(signatures, buckets, config=minhash)],
               bands),
         Stage("near dedup: clusters", [MinhashDedupCluster(buckets, clusters, config=minhash)],
               1)],
        MinhashDedupFilter(clusters))


def _minhash_config(near: NearDedupConfig):
    """datatrove's MinHash with lmlab's n-gram size and LSH bands for the threshold; and the
    number of bands."""
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    bands, rows = lsh_bands(near.threshold, near.num_permutations)
    # sha1: datatrove's default xxhash is handed str, which xxhash 4 refuses; no text
    # normalisation: shingles of the cleaned text's words, as lmlab's own near dedup
    return MinhashConfig(n_grams=near.shingle_words, num_buckets=bands, hashes_per_bucket=rows,
                         seed=near.seed, hash_config=HashConfig(hash_fc="sha1"),
                         norm_config=TextNormConfig(
                             lowercase=False, norm_whitespace=False, remove_punctuation=False,
                             norm_unicode_diacritics=False, norm_numbers=False)), bands


def _tokenizer(recipe: Recipe, work: str, stream: str) -> Stage:
    from lmlab.data.preparation.datatrove_steps import TrainTokenizer

    return Stage(f"train {recipe.tokenizer} tokenizer",
                 [TrainTokenizer(recipe, f"{work}/{stream}", work)], 1)


def _encode(recipe: Recipe, work: str, stream: str, tasks: int) -> Stage:
    from lmlab.data.preparation.datatrove_steps import EncodeShards, ReadRankFile

    return Stage("encode", [ReadRankFile(f"{work}/{stream}"), EncodeShards(recipe, work)], tasks)


def _text(document) -> bytes:
    return document.text.encode("utf-8")


def _executor(engine: Engine, stage: Stage, logs: Path):
    if engine.executor == "local":
        from lmlab.data.preparation.datatrove_quiet import local_executor

        return local_executor(engine.verbose)(
            stage.pipeline, tasks=stage.tasks,
            workers=min(stage.tasks, len(os.sched_getaffinity(0))), logging_dir=str(logs))
    if engine.executor == "ray":
        from datatrove.executor.ray import RayPipelineExecutor

        _connect_ray()
        return RayPipelineExecutor(stage.pipeline, tasks=stage.tasks, logging_dir=str(logs),
                                   cpus_per_task=1)


def _connect_ray() -> None:
    import ray
    if ray.is_initialized():
        return
    try:
        connect("--executor ray", log_to_driver=False)  # the tasks log to their own files
    except ConnectionError as error:  # not a failed write of the dataset (an OSError too)
        raise DataError(str(error)) from None


def _datatrove_version() -> str:
    from importlib.metadata import version

    return version("datatrove")
