"""What one continued pre-training step of a SmolLM2-135M-sized model costs beyond its forward
and backward pass, by optimizer: the model's forward and backward in transformers
(LlamaForCausalLM, SmolLM2-135M's shape, random weights: no download), lmlab's Muon step over
the blocks' weight matrices (what `--optimizer auto` runs under `--init`) and fused AdamW over
every parameter, each timed in turn in this process, round after round, so that machine load
hits them alike. Reported as medians and as ratios to the forward and backward.

    python benchmarks/init_step.py [--tokens 1024] [--seq-len 256] [--rounds 5] [--threads 2]

Writes benchmarks/results/init_step.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from record import machine, write_results

RESULTS = Path(__file__).parent / "results" / "init_step.json"
# SmolLM2-135M's shape (its config.json): 30 layers of 576, grouped-query attention 9/3.
SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
             num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
             max_position_embeddings=2048, tie_word_embeddings=True)


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmlab.train.optim import Muon

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024, help="tokens a step")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    load = f"load average {os.getloadavg()[0]:.2f} as it started"  # other work on the cores
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM(LlamaConfig(**SHAPE)).train()
    ids = torch.randint(0, SHAPE["vocab_size"], (args.tokens // args.seq_len, args.seq_len))
    # the blocks' weight matrices, as lmlab.train.optim.hidden_matrices picks them
    matrices = [p for name, p in model.named_parameters() if p.ndim == 2 and ".layers." in name]
    muon = Muon(matrices, lr=1e-4, weight_decay=0.1)
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def forward_backward() -> None:
        model.zero_grad(set_to_none=False)
        model(input_ids=ids, labels=ids).loss.backward()

    times: dict[str, list[float]] = {"forward_backward": [], "muon_step": [], "adamw_step": []}
    forward_backward()  # warm: allocations, gradients and optimizer states exist after it
    muon.step(), adamw.step()
    for _ in range(args.rounds):
        times["forward_backward"].append(timed(forward_backward))
        times["muon_step"].append(timed(muon.step))
        times["adamw_step"].append(timed(adamw.step))
    median = {name: statistics.median(values) for name, values in times.items()}
    results = {
        "machine": machine(threads=args.threads, load=load),
        "model": "LlamaForCausalLM at SmolLM2-135M's shape, random weights", "shape": SHAPE,
        "tokens_per_step": args.tokens, "seq_len": args.seq_len, "rounds": args.rounds,
        "muon_matrices": len(matrices), "seconds": times, "median_seconds": median,
        "muon_of_forward_backward": median["muon_step"] / median["forward_backward"],
        "adamw_of_forward_backward": median["adamw_step"] / median["forward_backward"],
        "muon_of_adamw": median["muon_step"] / median["adamw_step"]}
    write_results(RESULTS, results)
    print({k: round(v, 3) for k, v in results.items() if k.endswith(("backward", "adamw"))},
          {k: round(v, 3) for k, v in median.items()})


if __name__ == "__main__":
    main()
