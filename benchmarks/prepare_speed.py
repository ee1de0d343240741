"""Speed and memory of `lmlab prepare` and the reading side, against baselines run here.

Corpus: the State of the Union addresses and the Brown corpus (shared/data/corpora,
16.7 MB of text), grown to 50 MB. Plain repeats would be removed by deduplication, and a
copy number in front of each document would still leave near-duplicates, so copy 1, 2, ...
re-deals the corpus's sentences (seeded shuffle) into new documents with the originals'
sentence counts: real sentences, but documents that are neither exact nor near duplicates.

    throughput   end-to-end prepare with a given tokenizer (read, NFC, control characters,
                 exact and near dedup, split, encode, sentence offsets, write), in one
                 process (workers=1) and with a worker per core (the default), against raw
                 `Tokenizer.encode_batch` of the same text, same chunks, same tokenizer, same
                 cores: wall time, CPU time (worker processes included) over wall time, and
                 tokens per second; the same prepare on the datatrove engine (local executor,
                 a task per core) when datatrove is installed; and prepare training its own
                 tokenizer
    memory       peak RSS of prepare and of the reading side (300 batches of 32 x 128) for
                 1x (2.5 MB) and 20x (50 MB) input: the peak during the work (VmHWM reset
                 after the imports) and the whole process's peak
    near-dedup   MinHash + LSH over 100,000 documents, documents per second

Every measurement runs in its own process, so its peak RSS is its own. Timings alternate
between the contenders and report the median of the repeats.

    python benchmarks/prepare_speed.py             # about 10 minutes on 2 cores
    python benchmarks/prepare_speed.py --mb 20     # a smaller corpus (results say its size)
    python benchmarks/prepare_speed.py --quick     # a smoke run on small inputs
    python benchmarks/prepare_speed.py --throughput-only   # the engines' speed alone
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from record import SHARED, machine, write_results

CORPORA = SHARED / "data" / "corpora"
DATATROVE = importlib.util.find_spec("datatrove") is not None  # the engine's row, when installed
RESULTS = Path(__file__).with_name("results") / "prepare_speed.json"


# ---------------------------------------------------------------- the corpus


def base_documents() -> list[str]:
    return [json.loads(line)["text"] for name in ("sotu.jsonl", "brown.jsonl")
            for line in (CORPORA / name).open(encoding="utf-8")]


def split_sentences(text: str) -> list[str]:
    from lmlab.data.preparation.sentences import sentence_starts

    cuts = [0, *sentence_starts(text), len(text)]
    return [text[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False) if text[a:b].strip()]


def grown_documents(target_bytes: int):
    """Copy 0 is the corpus; copy k re-deals all its sentences with seed k. Yields texts."""
    documents = base_documents()
    per_document = [split_sentences(d) for d in documents]
    sentences = [s for doc in per_document for s in doc]
    produced, copy = 0, 0
    while produced < target_bytes:
        if copy == 0:
            texts = documents
        else:
            order = np.random.default_rng(copy).permutation(len(sentences))
            bounds = np.cumsum([0] + [len(doc) for doc in per_document])
            texts = [" ".join(sentences[i] for i in order[a:b])
                     for a, b in zip(bounds, bounds[1:], strict=False)]
        for text in texts:
            yield text
            produced += len(text.encode("utf-8"))
            if produced >= target_bytes:
                return
        copy += 1


def write_corpus(path: Path, target_bytes: int) -> dict:
    count = size = 0
    with path.open("w", encoding="utf-8") as f:
        for text in grown_documents(target_bytes):
            f.write(json.dumps({"id": count, "text": text}, ensure_ascii=False) + "\n")
            count += 1
            size += len(text.encode("utf-8"))
    return {"path": str(path), "documents": count, "text_bytes": size,
            "file_bytes": path.stat().st_size}


# ---------------------------------------------------------------- measured in a child process


def cpu_seconds() -> float:
    """User and system time of this process, every thread included, and of its finished
    child processes (prepare's workers)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def begin() -> tuple[float, float]:
    """Start a measurement: reset the peak RSS (Linux keeps it in VmHWM), so that the import
    of torch and friends, which peaks higher than it stays, does not hide the work's peak."""
    global MACHINE_CPU_BEFORE
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    MACHINE_CPU_BEFORE = machine_cpu_seconds()
    return time.perf_counter(), cpu_seconds()


# The machine's CPU time when the work began: datatrove's task processes are children of its
# fork server, not of this process, so only the machine's count sees their CPU time.
MACHINE_CPU_BEFORE = 0.0


def work_peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def child(task: str, args: dict) -> dict:
    import lmlab.data

    if task == "raw_encode":
        from tokenizers import Tokenizer

        from lmlab.data.preparation.streaming import chunked

        tokenizer = Tokenizer.from_file(args["tokenizer"])
        texts = [json.loads(line)["text"] for line in open(args["corpus"], encoding="utf-8")]
        start, cpu_before = begin()
        tokens = 0
        for chunk in chunked(texts):  # the chunks prepare encodes
            encodings = tokenizer.encode_batch(chunk, add_special_tokens=False)
            tokens += sum(len(e.ids) for e in encodings)
        result = {"seconds": time.perf_counter() - start, "tokens": tokens}
    elif task == "prepare":
        from lmlab.data.preparation import prepare

        engine = None
        if args.get("engine"):
            from lmlab.data.preparation import Engine

            engine = Engine(**args["engine"])
        shutil.rmtree(args["out"], ignore_errors=True)
        start, cpu_before = begin()
        prepare([args["corpus"]], args["out"], workers=args.get("workers"), engine=engine,
                **args["recipe"])
        result = {"seconds": time.perf_counter() - start}
        meta = json.loads((Path(args["out"]) / "meta.json").read_text())
        result["tokens"] = sum(s["tokens"] for s in meta["splits"].values())
        result["documents_out"] = meta["cleaning"]["documents_out"]
    elif task == "read":
        from lmlab.data.loader import BlockBatches

        dataset = lmlab.data.open_dataset(args["out"])
        special = dataset.special
        start, cpu_before = begin()
        batches = BlockBatches(dataset.train, 128, 32, args["packing"], special.pad,
                               special.sep, seed=0)
        for index in range(args["batches"]):
            batches.batch(index % (batches.batches_per_epoch * 2))
        result = {"seconds": time.perf_counter() - start, "blocks": batches.num_blocks}
    elif task == "near_dedup":
        from lmlab.data.preparation.cleaning import NEAR_DEDUP_BATCH
        from lmlab.data.preparation.near_dedup import NearDedupConfig, NearDeduplicator

        texts = [json.loads(line)["text"] for line in open(args["corpus"], encoding="utf-8")]
        deduplicator = NearDeduplicator(NearDedupConfig())
        start, cpu_before = begin()
        kept = sum(int(deduplicator.keep(texts[i: i + NEAR_DEDUP_BATCH]).sum())
                   for i in range(0, len(texts), NEAR_DEDUP_BATCH))
        result = {"seconds": time.perf_counter() - start, "documents": len(texts),
                  "near_duplicates": len(texts) - kept}
    else:
        raise ValueError(task)
    result["cpu_seconds"] = cpu_seconds() - cpu_before
    result["machine_cpu_seconds"] = machine_cpu_seconds() - MACHINE_CPU_BEFORE
    result["work_peak_rss_mb"] = work_peak_rss_mb()
    result["process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["largest_child_peak_rss_mb"] = \
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return result


def machine_cpu_seconds() -> float:
    """CPU time every process on the machine has used since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(n) for n in f.readline().split()[1:9]]
    del ticks[3:5]  # idle, iowait
    return sum(ticks) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(task: str, **args) -> dict:
    """`child(task, args)` in a process of its own, with the CPU time other work on the
    machine used meanwhile: a contender shares the cores with it."""
    machine, ours = machine_cpu_seconds(), children_cpu_seconds()
    done = subprocess.run([sys.executable, __file__, "--child", task, json.dumps(args)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{task} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["others_cpu_seconds"] = (machine_cpu_seconds() - machine) - \
        (children_cpu_seconds() - ours)
    return result


# ---------------------------------------------------------------- the benchmark


def near_dedup_documents(path: Path, count: int) -> None:
    """`count` documents of about five sentences, from the grown corpus."""
    written = 0
    with path.open("w", encoding="utf-8") as f:
        sentences: list[str] = []
        for text in grown_documents(10**12):
            sentences.extend(split_sentences(text))
            while len(sentences) >= 5 and written < count:
                f.write(json.dumps({"text": " ".join(sentences[:5])}) + "\n")
                del sentences[:5]
                written += 1
            if written == count:
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size in MB of text")
    parser.add_argument("--throughput-only", action="store_true",
                        help="only the throughput rows, written to prepare_speed_throughput.json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.child[0], json.loads(options.child[1]))))
        return
    scale = 0.2 if options.quick else options.mb / 50
    work = Path(tempfile.mkdtemp(prefix="prepare-speed-"))
    results: dict = {"machine": machine(), "load_average_at_start": os.getloadavg()}
    results["load_average_at_end"] = None
    try:
        big = write_corpus(work / "big.jsonl", int(50e6 * scale))
        small = write_corpus(work / "small.jsonl", int(2.5e6 * scale))
        results["corpus"] = {"1x": small, "20x": big, "note": __doc__.split("\n\n")[1]}
        print(f"corpus: {big['text_bytes'] / 1e6:.1f} MB, {big['documents']} documents")

        trained = measure("prepare", corpus=big["path"], out=str(work / "trained"),
                          recipe={"validation_fraction": 0.1})
        tokenizer = str(work / "trained" / "tokenizer.json")
        given = {"tokenizer": tokenizer, "validation_fraction": 0.1}
        runs: dict[str, list] = {"raw_encode": [], "prepare_one_process": [], "prepare": []}
        if DATATROVE:
            runs["prepare_datatrove_local"] = []
        for _ in range(options.repeats):
            runs["raw_encode"].append(measure("raw_encode", corpus=big["path"],
                                              tokenizer=tokenizer))
            runs["prepare_one_process"].append(measure(
                "prepare", corpus=big["path"], out=str(work / "given"), recipe=given, workers=1))
            runs["prepare"].append(measure("prepare", corpus=big["path"],
                                           out=str(work / "given"), recipe=given))
            if DATATROVE:  # a task per core, as the built-in default has a worker per core
                runs["prepare_datatrove_local"].append(measure(
                    "prepare", corpus=big["path"], out=str(work / "given"), recipe=given,
                    engine={"executor": "local"}))
        mb = big["text_bytes"] / 1e6
        speed = {name: mb / statistics.median(r["seconds"] for r in rs)
                 for name, rs in runs.items()}
        cpu = {name: statistics.median(r["cpu_seconds"] for r in rs) for name, rs in runs.items()}
        results["throughput"] = {
            "text_mb": mb,
            "raw_encode_batch_mb_per_s": speed["raw_encode"],
            "prepare_given_tokenizer_mb_per_s": speed["prepare"],
            "ratio": speed["prepare"] / speed["raw_encode"],
            # Each repeat runs the two back to back: their ratio is least affected by other
            # work on the machine drifting in and out.
            "ratio_of_adjacent_runs_median": statistics.median(
                raw["seconds"] / prepared["seconds"]
                for raw, prepared in zip(runs["raw_encode"], runs["prepare"], strict=True)),
            # On a busy machine wall time depends on how the scheduler shares the cores; CPU
            # time is the work done. Raw CPU over prepare CPU is the ratio a machine whose
            # cores both keep busy would show.
            "cpu_seconds_raw_encode": cpu["raw_encode"], "cpu_seconds_prepare": cpu["prepare"],
            "cpu_ratio": cpu["raw_encode"] / cpu["prepare"],
            "prepare_one_process_mb_per_s": speed["prepare_one_process"],
            "cpu_seconds_prepare_one_process": cpu["prepare_one_process"],
            # CPU time over wall time: 2 on 2 cores kept busy
            "cpu_over_wall": {name: statistics.median(r["cpu_seconds"] / r["seconds"]
                                                      for r in rs) for name, rs in runs.items()},
            # the same from the machine's count: every process, datatrove's tasks included
            "machine_cpu_over_wall": {
                name: statistics.median(r["machine_cpu_seconds"] / r["seconds"] for r in rs)
                for name, rs in runs.items()},
            "tokens_per_s": {name: statistics.median(r["tokens"] / r["seconds"] for r in rs)
                             for name, rs in runs.items()},
            "others_cpu_seconds": {name: statistics.median(r["others_cpu_seconds"] for r in rs)
                                   for name, rs in runs.items()},
            "prepare_training_bpe_8192_mb_per_s": mb / trained["seconds"],
            "runs": runs, "training_run": trained,
        }
        print(json.dumps({k: v for k, v in results["throughput"].items()
                          if k not in ("runs", "training_run")}, indent=1))
        if options.throughput_only:  # `finally` below removes the work folder
            return finish(results, options, work, RESULTS.with_name(
                "prepare_speed_throughput.json"))

        memory = {}
        for size, corpus in (("1x", small), ("20x", big)):
            out = str(work / f"rss-{size}")
            memory[f"prepare_given_{size}"] = measure("prepare", corpus=corpus["path"],
                                                      out=out, recipe=given)
            memory[f"prepare_training_{size}"] = trained if size == "20x" else measure(
                "prepare", corpus=corpus["path"], out=str(work / "rss-train-1x"),
                recipe={"validation_fraction": 0.1})
            for packing in ("concatenate", "best_fit", "sentences"):
                memory[f"read_{packing}_{size}"] = measure("read", out=out, packing=packing,
                                                           batches=300)
        growth = {name.removesuffix("_1x"): {
            kind: memory[name.replace("_1x", "_20x")][kind] / memory[name][kind]
            for kind in ("work_peak_rss_mb", "process_peak_rss_mb")}
            for name in memory if name.endswith("_1x")}
        results["memory"] = {"peak_rss_growth_20x_over_1x": growth, "runs": memory}
        print(json.dumps(growth, indent=1))

        near = work / "near.jsonl"
        near_dedup_documents(near, int(100_000 * scale))
        run = measure("near_dedup", corpus=str(near))
        results["near_dedup"] = {**run, "documents_per_s": run["documents"] / run["seconds"]}
        print(json.dumps(results["near_dedup"], indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish(results, options, work, RESULTS)


def finish(results: dict, options: argparse.Namespace, work: Path, path: Path) -> None:
    results["load_average_at_end"] = os.getloadavg()
    if not options.quick:
        write_results(path, results, work)
        print(f"written to {path}")


if __name__ == "__main__":
    main()
