"""BLiMP minimal-pair accuracy and held-out (pseudo-)perplexity of a masked and a causal run.

    python benchmarks/blimp_eval.py --mlm RUNS/mlm --clm RUNS/clm --data DATASET \
        [--blimp ../shared/data/blimp] [--pairs-per-file 200] [--max-tokens 20000]

Both runs score the same first N pairs of every BLiMP file (pseudo-log-likelihood costs one
forward row per token, which makes the masked model's full 67,000 pairs long on a CPU); the
causal run also scores every pair. Held-out text: the dataset's validation split, its first
documents up to --max-tokens tokens, the same for both runs.

Speed is tokens scored per second. The baseline, measured in the same process on the first
--baseline-tokens tokens of the same text, is the plain definition: one forward pass per
masked token (pseudo-perplexity) or per context-sized chunk (perplexity, chunks not
overlapping, so half the work of the default stride), vocabulary head at every position, no
batching. Writes benchmarks/results/blimp_eval.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from record import ROOT, machine, write_results

import lmlab
from lmlab import load
from lmlab.eval.evaluate import evaluation_text, scoring_rule
from lmlab.eval.report import format_report
from lmlab.model import MaskSpec

RESULTS = Path(__file__).parent / "results" / "blimp_eval.json"


def first_pairs(blimp: Path, per_file: int, out: Path) -> Path:
    """A copy of every BLiMP file cut to its first `per_file` pairs (same file names)."""
    for path in sorted(blimp.glob("*.jsonl")):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        (out / path.name).write_text("\n".join(lines[:per_file]) + "\n")
    return out


@torch.inference_mode()
def plain_tokens_per_second(pretrained, data: str, tokens: int) -> float:
    """The unbatched definition on the first `tokens` tokens of the validation split."""
    rule = scoring_rule(pretrained)
    text = evaluation_text(data, pretrained, max_tokens=tokens)
    model, special = pretrained.model, pretrained.special
    scored, start = 0, time.perf_counter()
    for ids in text.documents:
        row = torch.cat((torch.as_tensor(ids), torch.tensor([special.eos])))
        for begin in range(0, len(row) - 1, model.cfg.max_seq_len):  # independent chunks
            chunk = row[begin:begin + model.cfg.max_seq_len]
            if rule.name == "causal":
                logits = model(chunk[None], MaskSpec("causal"))["lm"][0]
                logits.log_softmax(-1)[:-1].gather(1, chunk[1:, None]).sum()
                scored += len(chunk) - 1
                continue
            for i in range(len(chunk)):
                if chunk[i] == special.eos:
                    continue
                masked = chunk.clone()
                masked[i] = special.mask
                model(masked[None], MaskSpec("bidirectional"))["mlm"][0, i].log_softmax(-1)
                scored += 1
            if scored >= tokens:
                break
        if scored >= tokens:
            break
    return scored / (time.perf_counter() - start)


def by_field(result: dict) -> dict[str, float]:
    (pairs,) = result["minimal_pairs"]
    fields = {name: stats["accuracy"] for name, stats in pairs["groups"]["field"].items()}
    return {**fields, "overall": pairs["accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlm", required=True)
    parser.add_argument("--clm", required=True)
    parser.add_argument("--data", required=True, help="the prepared dataset both runs used")
    parser.add_argument("--blimp", default=str(ROOT.parent / "shared" / "data" / "blimp"))
    parser.add_argument("--pairs-per-file", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=20000)
    parser.add_argument("--baseline-tokens", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    report = {"machine": machine(threads=torch.get_num_threads()),
              "settings": {**vars(args), "out": str(args.out)}}
    with tempfile.TemporaryDirectory() as folder:
        subset = first_pairs(Path(args.blimp), args.pairs_per_file, Path(folder))
        for name in ("mlm", "clm"):
            pretrained = load(getattr(args, name))
            result = lmlab.evaluate(pretrained, data=args.data, pairs=[subset],
                                    max_tokens=args.max_tokens, progress=True)
            result["pairs"]["files"] = [f"{args.blimp}/{Path(f).name}"
                                        for f in result["pairs"]["files"]]
            print(format_report(result), flush=True)
            plain = plain_tokens_per_second(pretrained, args.data, args.baseline_tokens)
            report[name] = {"result": result, "plain_tokens_per_second": plain}
    start = time.perf_counter()
    full = lmlab.evaluate(load(args.clm), pairs=[args.blimp], progress=True)
    report["clm_all_pairs"] = {"result": full, "seconds": time.perf_counter() - start}
    print(format_report(full), flush=True)

    summary = {"accuracy_by_field": {
        f"mlm, first {args.pairs_per_file} per file": by_field(report["mlm"]["result"]),
        f"clm, first {args.pairs_per_file} per file": by_field(report["clm"]["result"]),
        "clm, all pairs": by_field(full)}}
    for name in ("mlm", "clm"):
        (text,) = report[name]["result"]["perplexity"]
        (pairs,) = report[name]["result"]["minimal_pairs"]
        summary[name] = {
            text["metric"]: text["perplexity"], "bits_per_byte": text["bits_per_byte"],
            "text_tokens_per_second": text["tokens_per_second"],
            "plain_definition_tokens_per_second": report[name]["plain_tokens_per_second"],
            "speedup_over_plain": text["tokens_per_second"]
            / report[name]["plain_tokens_per_second"],
            "pair_tokens_per_second": pairs["tokens_per_second"],
            "pair_seconds": pairs["seconds"]}
    summary["pseudo_over_causal_speed"] = (summary["mlm"]["text_tokens_per_second"]
                                           / summary["clm"]["text_tokens_per_second"])
    report["summary"] = summary
    write_results(args.out, report)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
