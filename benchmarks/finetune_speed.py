"""Fine-tuning throughput of `lmlab finetune` against Hugging Face `Trainer` with
`BertForSequenceClassification` at the same size, batch and precision, measured in the same
run; prediction throughput beside it.

Reference: a bert-mini run (4 layers, d_model 256, 4 heads, FFN 1024, dropout 0.1, vocabulary
8192 WordPiece pieces trained on SST-2's training texts) pre-trained for one MLM step, then
fine-tuned for SST-2 sentiment for one epoch of a fixed subset of its training rows (the first
--rows, 1,920 by default: 60 steps, so every side trains on the same rows), at most 128 tokens
per row, batch 32, fp32 on the CPU, AdamW (lr 1e-4, weight decay 0.01, β2 0.999, 10% warm-up
then linear decay, gradient clipping at 1), the same number of optimizer steps and torch
threads on both sides. The HF model is built from the same architecture
(lmlab/export/hf.py `hf_config`) with the pre-trained backbone's weights, the tokenizer is the
same one wrapped in `PreTrainedTokenizerFast` (its [CLS] A [SEP] rows are checked to be the
ids lmlab encodes), batches are padded to their longest row (`DataCollatorWithPadding`), and
the Trainer runs with no evaluation, logging, checkpoints or reporting and no data workers.
lmlab reads with [CLS] pooling here, as BERT's classifier does.

Batches: lmlab groups rows of similar length by default (lmlab/finetune/data.py, as HF's
`group_by_length`); the Trainer by default does not. Four sides are measured so that the
grouping's share of the gain is visible: `lmlab` against `hf`, each as it comes (the
requirement's ratio); `lmlab` against `hf_grouped` (`train_sampling_strategy=
"group_by_length"`: both grouped); `lmlab_mixed` (`--mixed-lengths`) against `hf` (neither).

Each fine-tuning runs in its own process (so peak RSS and allocator state are its own); the
sides alternate which goes first, and medians over --repeats give the ratios. Tokens are
counted the same way for both: the non-padding tokens of the training rows a step trains on
(lmlab: `tokens` in metrics.jsonl; HF: the sum of `attention_mask` of each training batch);
the positions computed on, padding included, are reported as `padding_factor` (padded / real).
Three times are reported for each side:

  steady:  steps after the first --warmup-steps to the last (the headline: fine-tuning tokens/s
           once the loop runs; lmlab from its step-10 to its last metrics.jsonl line, HF from
           its step-10 to its last `on_step_end`), wall and CPU time;
  loop:    the whole training loop (lmlab `run_training` up to the last step's log line; HF
           `on_train_begin` to the last `on_step_end`);
  call:    the whole fine-tuning call as a user runs it, setup included: lmlab's `finetune()`
           (reading and encoding the data, loading the run, building the model, the loop,
           and the end-of-run validation, checkpoint, plots and results.json that lmlab always
           writes); HF: reading and tokenising the data, building the model and `Trainer`,
           `trainer.train()`.

lmlab's timestamps come from wrapping `run_training` and `Throughput.take` in the measuring
process (instrumentation only; nothing in lmlab changes). Prediction:
`lmlab.infer.predict.predict(run, texts)` over SST-2's first 512 dev sentences, against a
plain HF forward in batches of 64 (tokenising each batch) and
`pipeline("text-classification", batch_size=64)`, each after one warm-up batch; examples/s
(measured in the `lmlab` and `hf` processes only).

Needs `accelerate` for HF's Trainer (`pip install accelerate`).

    python benchmarks/finetune_speed.py                      # about 10 minutes on 2 idle cores
    python benchmarks/finetune_speed.py --sides hf lmlab --repeats 1
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from record import machine, write_results

DATA = Path(__file__).resolve().parents[1].parent / "shared/data/sst2"
VOCAB, MAX_LEN, BATCH, PREDICT_BATCH = 8192, 128, 32, 64
LR, WEIGHT_DECAY, BETA2 = 1e-4, 0.01, 0.999
SIDES = ("hf", "lmlab", "hf_grouped", "lmlab_mixed")
# (numerator, denominator) of the ratios reported: each as it comes, both grouping rows by
# length, neither grouping.
RATIOS = (("lmlab", "hf"), ("lmlab", "hf_grouped"), ("lmlab_mixed", "hf"))


# --- shared set-up (untimed): data subset, tokenizer, pre-trained run --------------------------

def read_tsv(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(label, text) rows of an SST-2 TSV (header `label<TAB>sentence`)."""
    with open(path, newline="") as file:
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        rows = [(label, text) for label, text in reader]
    return rows[:limit] if limit else rows


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> None:
    path.write_text("label\tsentence\n" + "".join(f"{label}\t{text}\n" for label, text in rows))


def hf_tokenizer(tokenizer_json: str):
    """lmlab's tokenizer as a `PreTrainedTokenizerFast` that writes `[CLS] A [SEP]`."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_str(tokenizer_json)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, cls_token="[CLS]",
                                   sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]",
                                   mask_token="[MASK]", model_max_length=MAX_LEN,
                                   model_input_names=["input_ids", "token_type_ids",
                                                      "attention_mask"])


def prepare(work: Path, data: Path, rows: int, predict_texts: int, threads: int) -> dict:
    """The training subset, a validation file, the prediction texts and a pre-trained run."""
    from lmlab.config.training import TrainConfig
    from lmlab.data.dataset import in_memory_dataset
    from lmlab.data.preparation.tokenizer_training import train_tokenizer
    from lmlab.data.tokenizer import special_tokens_of
    from lmlab.tasks.framing import Encoder
    from lmlab.train.entry import pretrain

    torch.set_num_threads(threads)
    everything = read_tsv(data / "train.tsv")
    train = everything[:rows]
    dev = read_tsv(data / "dev.tsv")
    write_tsv(work / "train.tsv", train)
    write_tsv(work / "validation.tsv", dev[:128])  # lmlab needs one; scored at the end only
    (work / "predict.json").write_text(json.dumps([text for _, text in dev[:predict_texts]]))
    tokenizer = train_tokenizer([text for _, text in everything], VOCAB, n_sentinels=0,
                                kind="wordpiece")
    special = special_tokens_of(tokenizer)
    ids = [e.ids for e in tokenizer.encode_batch([text for _, text in everything[-4000:]])]
    dataset = in_memory_dataset(ids[:-400], ids[-400:], special)
    dataset.tokenizer_json = tokenizer.to_str()
    run = pretrain(TrainConfig(objective="mlm", model="bert-mini", seq_len=MAX_LEN, steps=1,
                               batch_size=8, out=str(work / "pretrained"), overwrite=True),
                   dataset)
    # Both sides must train on the same token rows.
    encoder = Encoder(tokenizer, special, MAX_LEN, token_types=True)
    ours = [encoder.pair(text)[0] for _, text in train]
    theirs = hf_tokenizer(tokenizer.to_str())([text for _, text in train], truncation=True,
                                               max_length=MAX_LEN)["input_ids"]
    if ours != theirs:
        raise SystemExit("lmlab and the HF tokenizer encode the training rows differently")
    lengths = [len(row) for row in ours]
    return {"run": str(run), "train_rows": len(train), "mean_row_tokens":
            sum(lengths) / len(lengths), "max_row_tokens": max(lengths),
            "predict_texts": len(dev[:predict_texts])}


# --- one side, in its own process ----------------------------------------------------------

def window(stamps: list[tuple[int, float, float, int]], warmup: int) -> dict:
    """Steady-state rates from (step, wall, cpu, cumulative tokens) stamps, past `warmup`."""
    start = next(stamp for stamp in stamps if stamp[0] >= warmup)
    end = stamps[-1]
    tokens = end[3] - start[3]
    return {"steady_tokens": tokens, "steady_seconds": end[1] - start[1],
            "steady_tokens_per_second": tokens / (end[1] - start[1]),
            "steady_tokens_per_cpu_second": tokens / (end[2] - start[2]),
            "steady_steps": end[0] - start[0]}


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def timed_predictions(predict_texts, texts: list[str], passes: int = 2) -> list[float]:
    predict_texts(texts[:PREDICT_BATCH])  # warm-up
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        predict_texts(texts)
        seconds.append(time.perf_counter() - start)
    return seconds


def run_lmlab(work: Path, steps: int, warmup: int, mixed_lengths: bool = False,
              predictions: bool = True) -> dict:
    from lmlab.finetune import entry
    from lmlab.finetune.data import TaskData
    from lmlab.infer.predict import predict
    from lmlab.runs.metrics import read_metrics
    from lmlab.runs.run import load_run
    from lmlab.tasks.finetune_config import FinetuneConfig
    from lmlab.train import loop

    marks: dict[str, tuple[float, float]] = {}
    takes: list[tuple[float, float]] = []
    padded: list[int] = []
    run_training, take = entry.run_training, loop.Throughput.take
    micro_batches = TaskData.micro_batches

    def timed_run_training(training):
        marks["loop_start"] = clock()
        return run_training(training)

    def timed_take(self):
        takes.append(clock())  # the loop logs (and takes the rate) after the step's update
        return take(self)

    def counted_micro_batches(self, step, generator):
        batches = micro_batches(self, step, generator)
        padded.append(sum(batch.input_ids.numel() for batch in batches))
        return batches

    entry.run_training, loop.Throughput.take = timed_run_training, timed_take
    TaskData.micro_batches = counted_micro_batches
    cfg = FinetuneConfig(
        task="classify", train=str(work / "train.tsv"), validation=str(work / "validation.tsv"),
        out=str(work / "lmlab-finetuned"), overwrite=True, steps=steps, batch_size=BATCH,
        max_len=MAX_LEN, pooling="cls", precision="fp32", lr=LR, weight_decay=WEIGHT_DECAY,
        beta2=BETA2, warmup_steps=steps // 10, schedule="linear", grad_clip=1.0,
        eval_every=steps, log_every=warmup, mixed_lengths=mixed_lengths)
    start = clock()
    out = entry.finetune(work / "pretrained", cfg)
    end = clock()
    entry.run_training, loop.Throughput.take = run_training, take
    TaskData.micro_batches = micro_batches
    logged = [r for r in read_metrics(out) if r["kind"] == "train"]
    if len(logged) != len(takes) or logged[-1]["step"] != steps:
        raise RuntimeError(f"expected one rate per log line up to step {steps}")
    stamps = [(r["step"], wall, cpu, r["tokens"])
              for r, (wall, cpu) in zip(logged, takes, strict=True)]
    tokens = logged[-1]["tokens"]
    predict_seconds = {}
    if predictions:
        run = load_run(out)
        texts = json.loads((work / "predict.json").read_text())
        predict_seconds["lmlab"] = timed_predictions(lambda batch: predict(run, batch), texts)
    return {"tokens": tokens, "padded_tokens": sum(padded), "call_seconds": end[0] - start[0],
            "call_cpu_seconds": end[1] - start[1],
            "loop_seconds": takes[-1][0] - marks["loop_start"][0],
            "loop_cpu_seconds": takes[-1][1] - marks["loop_start"][1],
            "final_loss": logged[-1]["loss"], **window(stamps, warmup),
            "predict_seconds": predict_seconds}


def run_hf(work: Path, steps: int, warmup: int, grouped: bool = False,
           predictions: bool = True) -> dict:
    from transformers import (
        BertForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        pipeline,
    )

    from lmlab.export.hf import hf_config, to_hf_state_dict
    from lmlab.runs.run import load_run

    step_tokens: list[int] = []
    padded: list[int] = []
    stamps: list[tuple[int, float, float, int]] = []
    marks: dict[str, tuple[float, float]] = {}

    class CountingTrainer(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            step_tokens.append(int(inputs["attention_mask"].sum()))
            padded.append(inputs["input_ids"].numel())
            return super().compute_loss(model, inputs, *args, **kwargs)

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            marks["loop_start"] = clock()

        def on_step_end(self, args, state, control, **kwargs):
            stamps.append((state.global_step, *clock(), sum(step_tokens)))

    start = clock()
    pretrained = load_run(work / "pretrained")
    tokenizer = hf_tokenizer(pretrained.require_tokenizer().to_str())
    rows = read_tsv(work / "train.tsv")
    labels = sorted({label for label, _ in rows})
    encoded = tokenizer([text for _, text in rows], truncation=True, max_length=MAX_LEN)
    train = [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
              "label": labels.index(label)}
             for ids, types, mask, (label, _) in zip(
                 encoded["input_ids"], encoded["token_type_ids"], encoded["attention_mask"],
                 rows, strict=True)]
    config = hf_config(pretrained.model.cfg, "bert")
    config.num_labels = len(labels)
    model = BertForSequenceClassification(config)
    missing, _ = model.load_state_dict(to_hf_state_dict(pretrained.model, "bert"),
                                       strict=False)
    if not set(missing) <= {"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                            "classifier.weight", "classifier.bias"}:
        raise RuntimeError(f"backbone weights missing from the HF model: {missing}")
    args = TrainingArguments(
        output_dir=str(work / "hf-finetuned"), max_steps=steps,
        per_device_train_batch_size=BATCH, learning_rate=LR, weight_decay=WEIGHT_DECAY,
        adam_beta2=BETA2, warmup_steps=steps // 10, lr_scheduler_type="linear",
        max_grad_norm=1.0, eval_strategy="no", logging_strategy="no", save_strategy="no",
        report_to=[], dataloader_num_workers=0, use_cpu=True, seed=0, disable_tqdm=True,
        train_sampling_strategy="group_by_length" if grouped else "random")
    trainer = CountingTrainer(model=model, args=args, train_dataset=train,
                              data_collator=DataCollatorWithPadding(tokenizer),
                              callbacks=[Clock()])
    trainer.train()
    end = clock()
    if len(stamps) != steps or len(step_tokens) != steps:
        raise RuntimeError(f"expected {steps} steps, saw {len(stamps)}")
    result = {"tokens": sum(step_tokens), "padded_tokens": sum(padded),
              "call_seconds": end[0] - start[0],
              "call_cpu_seconds": end[1] - start[1],
              "loop_seconds": stamps[-1][1] - marks["loop_start"][0],
              "loop_cpu_seconds": stamps[-1][2] - marks["loop_start"][1],
              **window(stamps, warmup), "predict_seconds": {}}
    if not predictions:
        return result
    texts = json.loads((work / "predict.json").read_text())
    model.eval()

    @torch.inference_mode()
    def forward(batch: list[str]) -> list[int]:
        found = []
        for begin in range(0, len(batch), PREDICT_BATCH):
            inputs = tokenizer(batch[begin:begin + PREDICT_BATCH], padding=True,
                               truncation=True, max_length=MAX_LEN, return_tensors="pt")
            found += model(**inputs).logits.softmax(-1).argmax(-1).tolist()
        return found

    classify = pipeline("text-classification", model=model, tokenizer=tokenizer,
                        device="cpu")
    result["predict_seconds"] = {
        "hf_forward": timed_predictions(forward, texts),
        "hf_pipeline": timed_predictions(
            lambda batch: classify(batch, batch_size=PREDICT_BATCH, truncation=True,
                                   max_length=MAX_LEN), texts)}
    return result


def measure_one(side: str, work: Path, steps: int, warmup: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    load = os.getloadavg()[0]
    if side.startswith("lmlab"):
        result = run_lmlab(work, steps, warmup, mixed_lengths=side == "lmlab_mixed",
                           predictions=side == "lmlab")
    else:
        result = run_hf(work, steps, warmup, grouped=side == "hf_grouped",
                        predictions=side == "hf")
    result.update(peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  load_average_1min=[load, os.getloadavg()[0]])
    result["padding_factor"] = result["padded_tokens"] / result["tokens"]
    for key in ("call", "loop"):
        result[f"{key}_tokens_per_second"] = result["tokens"] / result[f"{key}_seconds"]
        result[f"{key}_tokens_per_cpu_second"] = result["tokens"] / result[f"{key}_cpu_seconds"]
    return result


# --- the comparison -------------------------------------------------------------------------

RATES = ("steady_tokens_per_second", "steady_tokens_per_cpu_second", "loop_tokens_per_second",
         "call_tokens_per_second")


def ratio_name(numerator: str, denominator: str) -> str:
    return f"{numerator}/{denominator}"


def summarise(results: dict[str, list[dict]], predict_texts: int) -> dict:
    medians = {side: {key: statistics.median(r[key] for r in runs) for key in
                      (*RATES, "call_seconds", "loop_seconds", "padding_factor",
                       "peak_rss_mb")}
               for side, runs in results.items()}
    ratios, paired = {}, {}
    for numerator, denominator in RATIOS:
        if numerator not in results or denominator not in results:
            continue
        name = ratio_name(numerator, denominator)
        ratios[name] = {key: medians[numerator][key] / medians[denominator][key]
                        for key in RATES}
        # Runs of the same repeat ran close together, so load changes hit both.
        paired[name] = {key: statistics.median(
            ours[key] / theirs[key]
            for ours, theirs in zip(results[numerator], results[denominator], strict=True))
            for key in RATES}
    predictions = {}
    for runs in results.values():
        for name in runs[0]["predict_seconds"]:
            seconds = [s for r in runs for s in r["predict_seconds"][name]]
            predictions[name] = {"examples_per_second":
                                 predict_texts / statistics.median(seconds), "seconds": seconds}
    summary = {"medians": medians, "ratios": ratios, "paired_ratios": paired,
               "predict": predictions}
    if {"lmlab", "hf_forward", "hf_pipeline"} <= set(predictions):
        fastest_hf = max(predictions["hf_forward"]["examples_per_second"],
                         predictions["hf_pipeline"]["examples_per_second"])
        summary["predict_ratio_vs_fastest_hf"] = (
            predictions["lmlab"]["examples_per_second"] / fastest_hf)
    return summary


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=DATA, help="SST-2 directory")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--rows", type=int, default=1920, help="training rows (the first)")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--warmup-steps", type=int, default=10,
                        help="steps left out of the steady rate (also lmlab's log interval)")
    parser.add_argument("--predict-texts", type=int, default=512,
                        help="SST-2 dev sentences to predict (the first)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/finetune_speed.json"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.work, args.steps, args.warmup_steps,
                                     args.threads)))
        return
    if args.steps <= args.warmup_steps:
        parser.error("--steps must exceed --warmup-steps")
    try:
        import accelerate  # noqa: F401 - HF's Trainer needs it
    except ImportError:
        raise SystemExit("HF's Trainer needs accelerate: pip install accelerate") from None
    sides = [side for side in SIDES if side in args.sides]
    with tempfile.TemporaryDirectory(prefix="finetune-speed-") as work:
        work = Path(work)
        prepared = prepare(work, args.data, args.rows, args.predict_texts, args.threads)
        epochs = args.steps * BATCH / prepared["train_rows"]
        print(f"{prepared['train_rows']} training rows, {prepared['mean_row_tokens']:.1f} "
              f"tokens per row on average; {args.steps} steps of {BATCH} ({epochs:.2f} "
              "epochs)", flush=True)
        results: dict[str, list[dict]] = {side: [] for side in sides}
        for repeat in range(args.repeats):  # alternated, so load changes hit every side
            for side in sides if repeat % 2 == 0 else reversed(sides):
                command = [sys.executable, __file__, "--one", side, "--work", str(work),
                           "--steps", str(args.steps), "--warmup-steps",
                           str(args.warmup_steps), "--threads", str(args.threads)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{side} failed:\n{done.stderr[-4000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results[side].append(result)
                print(f"repeat {repeat + 1} {side:11}: padding "
                      f"{result['padding_factor']:.2f}x, steady "
                      f"{result['steady_tokens_per_second']:6.0f} tok/s "
                      f"({result['steady_tokens_per_cpu_second']:5.0f} per CPU-s), loop "
                      f"{result['loop_tokens_per_second']:6.0f} tok/s, call "
                      f"{result['call_seconds']:5.1f} s, load "
                      f"{result['load_average_1min'][1]:.1f}", flush=True)
    summary = summarise(results, prepared["predict_texts"])
    for name, ratio in summary["ratios"].items():
        paired = summary["paired_ratios"][name]
        print(f"{name:18} medians of {args.repeats}: steady "
              f"{ratio['steady_tokens_per_second']:.2f}x (CPU-time "
              f"{ratio['steady_tokens_per_cpu_second']:.2f}x; paired "
              f"{paired['steady_tokens_per_second']:.2f}x), loop "
              f"{ratio['loop_tokens_per_second']:.2f}x, whole call "
              f"{ratio['call_tokens_per_second']:.2f}x")
    if summary["predict"]:
        print("prediction: " + ", ".join(
            f"{name} {found['examples_per_second']:.0f} examples/s"
            for name, found in summary["predict"].items())
            + (f"; lmlab / fastest HF {summary['predict_ratio_vs_fastest_hf']:.2f}x"
               if "predict_ratio_vs_fastest_hf" in summary else ""))
    report = {"model": "bert-mini", "vocab_size": VOCAB, "max_len": MAX_LEN,
              "batch_size": BATCH, "precision": "fp32", "steps": args.steps,
              "epochs": epochs, "warmup_steps_excluded": args.warmup_steps,
              "repeats": args.repeats, "threads": args.threads, **prepared,
              "transformers": transformers.__version__, "machine": machine(), **summary,
              "runs": results}
    report.pop("run")
    write_results(args.out, report, work)


if __name__ == "__main__":
    main()
