"""Generation speed of lmlab's KV-cache decoder against Hugging Face `GPT2LMHeadModel.generate`
with identical weights, measured in the same process.

Reference: the gpt2-mini preset (4 layers, d_model 256, 4 heads), vocabulary 8192, random
weights converted through lmlab/export/hf.py; a 16-token prompt, greedy decoding of exactly
128 new tokens, batch 1 and batch 8, fp32, 2 CPU threads. Repeats alternate which side
runs first, so machine noise hits both; the medians give the ratio. Greedy output must be
identical token for token.

    python benchmarks/generate_speed.py
    python benchmarks/generate_speed.py --repeats 3 --batch-sizes 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from record import machine, write_results

VOCAB, PROMPT_LEN, NEW_TOKENS, CONTEXT = 8192, 16, 128, 256


def build_models(preset_name: str):
    import transformers

    from lmlab import LanguageModel, Pretrained, SpecialTokens, preset
    from lmlab.export.hf import hf_config, to_hf_state_dict

    torch.manual_seed(0)
    cfg = preset(preset_name, VOCAB, CONTEXT, dropout=0.0)
    model = LanguageModel(cfg, heads=("lm",)).eval()
    ours = Pretrained.of(model, "clm", SpecialTokens.layout(VOCAB, 100))
    theirs = transformers.GPT2LMHeadModel(hf_config(cfg, "gpt2")).eval()
    theirs.load_state_dict(to_hf_state_dict(model, "gpt2"), strict=True)
    return ours, theirs


def lmlab_generate(ours, prompts: torch.Tensor) -> torch.Tensor:
    made = ours.generate(prompts.tolist(), NEW_TOKENS, greedy=True, ignore_eos=True)
    return torch.tensor([result.ids for result in made])


def hf_generate(theirs, prompts: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        out = theirs.generate(prompts, attention_mask=torch.ones_like(prompts),
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[:, PROMPT_LEN:]


def timed(generate, model, prompts) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    tokens = generate(model, prompts)
    return time.perf_counter() - start, tokens


def measure(ours, theirs, batch_size: int, repeats: int) -> dict:
    prompts = torch.randint(107, VOCAB, (batch_size, PROMPT_LEN),
                            generator=torch.Generator().manual_seed(batch_size))
    sides = {"lmlab": (lmlab_generate, ours), "hf": (hf_generate, theirs)}
    outputs = {name: timed(*side, prompts)[1] for name, side in sides.items()}  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(repeats):
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for name in order:
            seconds[name].append(timed(*sides[name], prompts)[0])
    new_tokens = batch_size * NEW_TOKENS
    speed = {name: new_tokens / statistics.median(times) for name, times in seconds.items()}
    return {"batch_size": batch_size,
            "identical_greedy_tokens": bool(torch.equal(outputs["lmlab"], outputs["hf"])),
            "lmlab_tokens_per_second": speed["lmlab"], "hf_tokens_per_second": speed["hf"],
            "ratio": speed["lmlab"] / speed["hf"],
            "lmlab_seconds": seconds["lmlab"], "hf_seconds": seconds["hf"]}


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-mini")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/results/generate_speed.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ours, theirs = build_models(args.preset)
    rows = []
    for batch_size in args.batch_sizes:
        row = measure(ours, theirs, batch_size, args.repeats)
        rows.append(row)
        print(f"batch {batch_size}: lmlab {row['lmlab_tokens_per_second']:6.0f} tok/s  "
              f"hf {row['hf_tokens_per_second']:6.0f} tok/s  ratio {row['ratio']:.2f}  "
              f"identical greedy tokens: {row['identical_greedy_tokens']}", flush=True)
    summary = {"preset": args.preset, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS,
               "threads": args.threads, "repeats": args.repeats,
               "transformers": transformers.__version__, "machine": machine(),
               "load_average": os.getloadavg(), "rows": rows}
    write_results(args.out, summary)


if __name__ == "__main__":
    main()
