"""Training throughput of lmlab against Hugging Face baselines, measured in the same run.

lmlab is measured twice: like for like (PyTorch's default matmul path and malloc, as HF uses),
and as `lmlab pretrain` runs by default (oneDNN fp32 linear layers on CPUs other than Intel's,
malloc keeping freed memory: lmlab/kernels/machine.py), whose gain is reported separately.
MFU is against the device's own peak for the precision (lmlab.train.flops), and the
results name the machine they were measured on. "Products alone" times nothing but a step's
matrix products at their shapes on this machine (`floor_step_fn`): the pace no implementation
can beat, and each one's share of it.

Reference config (--shape reference): 4 layers, d_model 256, 4 heads, FFN 1024, sequence 128,
batch 32, vocabulary 8192, 2 CPU threads. --shape gpt2-124m and bert-base are GPT-2 small
(sequence 1024) and BERT-base (sequence 512), for --device cuda. Baselines: BertForMaskedLM
with DataCollatorForLanguageModeling masking, and GPT2LMHeadModel, each trained with a plain
AdamW loop. Settings: fp32 eager, bf16 autocast eager, bf16 + torch.compile. Each measurement
runs in its own process so peak RSS is its own.

For CLM, nanoGPT's GPT (its own model.py, imported from a checkout given by --nanogpt, e.g.
`git clone https://github.com/karpathy/nanoGPT`) with the same shape, GPT-2's biases and
tied embeddings, trained with its own configure_optimizers, is a second baseline.

    python benchmarks/train_speed.py                 # everything (several minutes)
    python benchmarks/train_speed.py --settings fp32 --steps 8
    python benchmarks/train_speed.py --objectives clm --nanogpt ~/src/nanoGPT
    python benchmarks/train_speed.py --device cuda --shape gpt2-124m --objectives clm \
        --settings bf16+compile --nanogpt ~/src/nanoGPT
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
from record import machine, write_results

from lmlab.kernels.machine import keep_freed_memory


@dataclass(frozen=True)
class Shape:
    """lmlab's preset size (layers, width, heads, FFN: the same for every implementation),
    vocabulary, context and batch."""

    size: str
    vocab: int
    seq: int
    batch: int


SHAPES = {"reference": Shape("mini", 8192, 128, 32),
          "gpt2-124m": Shape("base", 50304, 1024, 16),  # GPT-2's vocabulary padded to 64s
          "bert-base": Shape("base", 30522, 512, 32)}
SETTINGS = ("fp32", "bf16", "bf16+compile")
# (name, environment; None: unset): like for like, lmlab uses PyTorch's default matmul path and
# malloc, as HF does; "lmlab+tuned" is what `lmlab pretrain` users get by default (oneDNN fp32
# linear layers except on Intel CPUs, and malloc keeping freed memory), a separate gain.
IMPLEMENTATIONS = (("hf", {"LMLAB_ONEDNN": "0", "LMLAB_MALLOC_TUNE": "0"}),
                   ("lmlab", {"LMLAB_ONEDNN": "0", "LMLAB_MALLOC_TUNE": "0"}),
                   ("lmlab+tuned", {"LMLAB_ONEDNN": None, "LMLAB_MALLOC_TUNE": None}))


def model_config(objective_name: str, shape: Shape):
    from lmlab import preset

    family = "bert" if objective_name == "mlm" else "gpt2"
    return preset(f"{family}-{shape.size}", shape.vocab, shape.seq, dropout=0.0)


class LmlabParts(NamedTuple):
    """lmlab's step in its parts, as `lmlab pretrain` makes them."""

    make_batch: Callable  # () → a batch on the host
    compute_loss: Callable  # batch → the loss
    optimizer: torch.optim.Optimizer
    counted: tuple  # (model config, objective), for MFU


def lmlab_parts(objective_name: str, compile_model: bool, shape: Shape,
                device: torch.device, one_graph: bool | None = None) -> LmlabParts:
    from lmlab import LanguageModel, SpecialTokens
    from lmlab.objectives.registry import build_objective
    from lmlab.train.optim import make_optimizer
    from lmlab.train.step import forward_loss

    special = SpecialTokens.layout(shape.vocab, n_sentinels=100)
    cfg = model_config(objective_name, shape)
    objective = build_objective(objective_name, special)
    model = LanguageModel(cfg, heads=objective.heads).to(device)
    optimizer = make_optimizer(model, 1e-4)
    compute_loss = forward_loss(model, objective, compile_model, one_graph)
    generator = torch.Generator().manual_seed(0)
    first_ordinary = max(special.all_ids) + 1

    def make_batch():
        tokens = torch.randint(first_ordinary, shape.vocab, (shape.batch, shape.seq),
                               generator=generator)
        return objective.make_batch(tokens, generator)

    return LmlabParts(make_batch, compute_loss, optimizer, (cfg, objective))


def lmlab_step(parts: LmlabParts, precision: str, device: torch.device,
               phase_done: Callable[[], None] = lambda: None) -> None:
    """One training step, calling `phase_done` after each of its phases: the batch made and
    moved, forward (with the fused loss's own gradient, which it forms as it goes), backward,
    the optimizer's step."""
    batch = parts.make_batch().to(device)
    phase_done()
    with torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16"):
        loss = parts.compute_loss(batch).mean()
    phase_done()
    loss.backward()
    phase_done()
    parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=True)
    phase_done()


def lmlab_step_fn(objective_name: str, compile_model: bool, shape: Shape, device: torch.device):
    parts = lmlab_parts(objective_name, compile_model, shape, device)

    def step(precision: str) -> None:
        lmlab_step(parts, precision, device)

    # MFU counts the vocabulary projection and the last block past attention at the share
    # of positions the objective predicts (15% for MLM), as `lmlab pretrain` does: never
    # work lmlab does not do.
    return step, parts.counted


def hf_model(objective_name: str, shape: Shape):
    """BertForMaskedLM (mlm) or GPT2LMHeadModel at lmlab's preset size, without dropout, and
    the masking collator a masked model trains with (None for GPT-2)."""
    from tokenizers import Tokenizer, models
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
    )

    cfg = model_config(objective_name, shape)
    if objective_name != "mlm":
        return GPT2LMHeadModel(GPT2Config(
            vocab_size=shape.vocab, n_embd=cfg.d_model, n_layer=cfg.n_layers,
            n_head=cfg.n_heads, n_positions=shape.seq, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0)), None
    model = BertForMaskedLM(BertConfig(
        vocab_size=shape.vocab, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.ffn_dim,
        max_position_embeddings=shape.seq, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))
    vocab = {f"t{i}": i for i in range(5, shape.vocab)}
    vocab.update({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4})
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]")
    return model, DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)


def hf_inputs(tokens: torch.Tensor, collator) -> dict:
    """A Hugging Face model's inputs for (B, T) `tokens`: masked by `collator`, or as their
    own labels (the model shifts them) without one."""
    if collator is None:
        return {"input_ids": tokens, "labels": tokens}
    batch = collator([{"input_ids": row} for row in tokens.tolist()])
    return {"input_ids": batch["input_ids"], "labels": batch["labels"]}


def hf_step_fn(objective_name: str, compile_model: bool, shape: Shape, device: torch.device):
    model, collator = hf_model(objective_name, shape)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if compile_model else model
    generator = torch.Generator().manual_seed(0)

    def step(precision: str) -> None:
        tokens = torch.randint(107, shape.vocab, (shape.batch, shape.seq), generator=generator)
        inputs = {name: value.to(device)
                  for name, value in hf_inputs(tokens, collator).items()}
        with torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, None


def nanogpt_model(model_file: Path, shape: Shape):
    """nanoGPT's GPT, from its own model.py (`model_file`), at GPT-2's layout (biases, tied
    embeddings) and lmlab's preset size, without dropout."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nanogpt_model", model_file)
    nanogpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nanogpt)
    cfg = model_config("clm", shape)
    return nanogpt.GPT(nanogpt.GPTConfig(
        block_size=shape.seq, vocab_size=shape.vocab, n_layer=cfg.n_layers, n_head=cfg.n_heads,
        n_embd=cfg.d_model, dropout=0.0, bias=True))


def nanogpt_step_fn(objective_name: str, compile_model: bool, shape: Shape,
                    device: torch.device):
    model = nanogpt_model(Path(os.environ["NANOGPT_DIR"]) / "model.py", shape).to(device)
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), device.type)
    forward = torch.compile(model) if compile_model else model
    generator = torch.Generator().manual_seed(0)

    def step(precision: str) -> None:
        tokens = torch.randint(107, shape.vocab, (shape.batch, shape.seq + 1),
                               generator=generator).to(device)
        with torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16"):
            _, loss = forward(tokens[:, :-1], tokens[:, 1:].contiguous())  # it views targets
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, None


def floor_step_fn(objective_name: str, compile_model: bool, shape: Shape,
                  device: torch.device):
    """lmlab's step's matrix products alone, on random matrices: each linear layer's forward
    and two backward products, attention's six batched products, and the vocabulary
    projection's three, on the rows lmlab runs them on (the projection, and the last block
    past attention, at the share of rows the objective predicts). Nothing that does this work
    trains faster at this machine's speed for these products: norms, activations, softmax,
    casts, the loss and the optimizer all come on top (the heads' small layers are left out,
    so this floor is, if anything, too fast)."""
    from lmlab import SpecialTokens
    from lmlab.objectives.registry import build_objective

    cfg = model_config(objective_name, shape)
    special = SpecialTokens.layout(shape.vocab, n_sentinels=100)
    objective = build_objective(objective_name, special)
    rows, d, heads = shape.batch * shape.seq, cfg.d_model, cfg.n_heads
    predicted = round(rows * objective.predicted_fraction(shape.batch, shape.seq))
    last_rows = round(rows * objective.last_block_fraction(shape.batch, shape.seq))
    after_attention = [(d, d), (d, cfg.ffn_dim), (cfg.ffn_dim, d)]
    products = ([(rows, d, 3 * d)] + [(rows, k, n) for k, n in after_attention]) * (
        cfg.n_layers - 1) + [(rows, d, 3 * d)] + [(last_rows, k, n) for k, n in after_attention]
    # (a's shape, b's shape, which of them is used transposed), as autograd lays them out
    sizes = []
    for m, k, n in products + [(predicted, d, shape.vocab)]:
        # y = x·Wᵀ (W stored n×k), dx = dy·W, dW = dyᵀ·x
        sizes += [((m, k), (n, k), "b"), ((m, n), (n, k), ""), ((m, n), (m, k), "a")]
    b, t, hd = shape.batch * heads, shape.seq, d // heads
    # s = q·kᵀ, o = p·v; dp = do·vᵀ, dv = pᵀ·do, dq = ds·k, dk = dsᵀ·q
    sizes += [((b, t, hd), (b, t, hd), "b"), ((b, t, t), (b, t, hd), ""),
              ((b, t, hd), (b, t, hd), "b"), ((b, t, t), (b, t, hd), "a"),
              ((b, t, t), (b, t, hd), ""), ((b, t, t), (b, t, hd), "a")] * cfg.n_layers
    operands = {}  # made once per precision, outside the timed steps

    def step(precision: str) -> None:
        if precision not in operands:
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            operands[precision] = [
                [torch.randn(size, device=device, dtype=dtype).transpose(-1, -2)
                 if side in transposed else torch.randn(size, device=device, dtype=dtype)
                 for size, side in ((a, "a"), (b, "b"))] for a, b, transposed in sizes]
        for a, b in operands[precision]:
            torch.matmul(a, b)

    return step, None


BUILDERS = {"lmlab": lmlab_step_fn, "hf": hf_step_fn, "nanogpt": nanogpt_step_fn,
            "floor": floor_step_fn}


def measure_one(implementation: str, objective: str, setting: str, steps: int, warmup: int,
                shape: Shape, device: torch.device) -> dict:
    if device.type == "cpu":
        torch.set_num_threads(2)
    torch.manual_seed(0)
    compile_model = setting.endswith("+compile")
    precision = setting.split("+")[0]
    if implementation == "lmlab":
        keep_freed_memory()  # as `lmlab pretrain` does (unless LMLAB_MALLOC_TUNE=0)
    step, counted = BUILDERS[implementation](objective, compile_model, shape, device)

    def finished() -> float:  # a GPU's queued work done, then the time
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    start = finished()
    step(precision)  # the first step pays for compilation, if any
    first_step = finished() - start
    # On CPUs with AMX the first bf16 steps build oneDNN kernels for each new shape (seen
    # here: 2-3 s a step for about seven steps, then 0.2 s), for every implementation alike.
    for _ in range(warmup):
        step(precision)
    start, cpu_start = finished(), time.process_time()
    for _ in range(steps):
        step(precision)
    elapsed, cpu = finished() - start, time.process_time() - cpu_start
    tokens = steps * shape.batch * shape.seq
    result = {"tokens_per_second": tokens / elapsed,
              # less sensitive than wall time to other processes on a busy machine
              "tokens_per_cpu_second": tokens / cpu,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "first_step_s": first_step}
    if device.type == "cuda":
        result["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    if counted is not None:
        from lmlab.model.flops import objective_flops_per_token
        from lmlab.train.flops import device_peak_flops

        cfg, objective = counted
        # the device's own peak for the precision: on a CPU, fp32 the better of MKL and
        # oneDNN, bf16 probed; on a GPU, its datasheet's dense peak
        peak = device_peak_flops(device, torch.bfloat16 if precision == "bf16" else torch.float32)
        result["mfu"] = (result["tokens_per_second"] / peak
                         * objective_flops_per_token(cfg, shape.seq, objective, shape.batch))
        result["peak_flops"] = peak
    return result


def _ratio(best: dict, numerator: str, denominator: str, key: str) -> float:
    return best[numerator][key] / best[denominator][key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=3, metavar=("IMPL", "OBJECTIVE", "SETTING"))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--objectives", nargs="+", default=["mlm", "clm"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured steps first")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/train_speed.json"))
    parser.add_argument("--shape", choices=list(SHAPES), default="reference")
    parser.add_argument("--batch", type=int, help="rows per step, instead of the shape's")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU")
    parser.add_argument("--nanogpt", type=Path,
                        help="a nanoGPT checkout: its GPT is a further CLM baseline")
    args = parser.parse_args()
    shape, device = SHAPES[args.shape], torch.device(args.device)
    if args.batch:
        shape = replace(shape, batch=args.batch)
    if args.one:
        print(json.dumps(measure_one(*args.one, args.steps, args.warmup, shape, device)))
        return
    rows = []
    for objective in args.objectives:
        for setting in args.settings:
            best: dict[str, dict] = {}
            implementations = [*IMPLEMENTATIONS, ("floor", IMPLEMENTATIONS[0][1])]
            if device.type == "cuda":  # the tuning is a CPU's (oneDNN, malloc): nothing to add
                implementations.remove(IMPLEMENTATIONS[2])
            if args.nanogpt and objective == "clm":
                implementations.append(("nanogpt", {**IMPLEMENTATIONS[0][1],
                                                    "NANOGPT_DIR": str(args.nanogpt)}))
            for _ in range(args.repeats):  # interleaved, so load changes hit every side
                for implementation, settings in implementations:
                    command = [sys.executable, __file__, "--one", implementation.split("+")[0],
                               objective, setting, "--steps", str(args.steps),
                               "--warmup", str(args.warmup), "--shape", args.shape,
                               "--batch", str(shape.batch), "--device", args.device]
                    env = {name: value for name, value in {**os.environ, **settings}.items()
                           if value is not None}
                    output = subprocess.run(command, capture_output=True, text=True,
                                            check=True, env=env)
                    result = json.loads(output.stdout.strip().splitlines()[-1])
                    kept = best.get(implementation)
                    if kept is None or result["tokens_per_second"] > kept["tokens_per_second"]:
                        best[implementation] = result
            row = {"objective": objective, "setting": setting,
                   "ratio": _ratio(best, "lmlab", "hf", "tokens_per_second"),
                   "ratio_cpu_time": _ratio(best, "lmlab", "hf", "tokens_per_cpu_second"),
                   **({"tuned_gain": _ratio(best, "lmlab+tuned", "lmlab", "tokens_per_second")}
                      if "lmlab+tuned" in best else {}),
                   # the share of the matrix products' own pace each one keeps
                   "lmlab_of_floor": _ratio(best, "lmlab", "floor", "tokens_per_second"),
                   "hf_of_floor": _ratio(best, "hf", "floor", "tokens_per_second"),
                   **({"ratio_nanogpt": _ratio(best, "lmlab", "nanogpt", "tokens_per_second"),
                       **({"ratio_nanogpt_tuned": _ratio(best, "lmlab+tuned", "nanogpt",
                                                         "tokens_per_second")}
                          if "lmlab+tuned" in best else {})}
                      if "nanogpt" in best else {}),
                   **{f"{impl}_{key}": value for impl, result in best.items()
                      for key, value in result.items()}}
            rows.append(row)
            lmlab = best["lmlab"]
            print(f"{objective:4} {setting:13} lmlab {lmlab['tokens_per_second']:6.0f} tok/s  "
                  f"hf {best['hf']['tokens_per_second']:6.0f} tok/s  ratio {row['ratio']:.2f} "
                  f"(CPU-time {row['ratio_cpu_time']:.2f})  "
                  + (f"tuned {best['lmlab+tuned']['tokens_per_second']:6.0f} tok/s "
                     f"(x{row['tuned_gain']:.2f})  " if "tuned_gain" in row else "")
                  + f"MFU {lmlab.get('mfu', float('nan')):.0%}  "
                  f"RSS lmlab {lmlab['peak_rss_mb']:.0f} MB / hf {best['hf']['peak_rss_mb']:.0f} MB"
                  f"  first step {lmlab['first_step_s']:.1f}s / hf "
                  f"{best['hf']['first_step_s']:.1f}s  products alone "
                  f"{best['floor']['tokens_per_second']:6.0f} tok/s (lmlab "
                  f"{row['lmlab_of_floor']:.0%}, hf {row['hf_of_floor']:.0%})"
                  + (f"  nanoGPT {best['nanogpt']['tokens_per_second']:6.0f} tok/s (lmlab "
                     f"x{row['ratio_nanogpt']:.2f}"
                     + (f", tuned x{row['ratio_nanogpt_tuned']:.2f}"
                        if "ratio_nanogpt_tuned" in row else "") + ")"
                     if "nanogpt" in best else ""), flush=True)
    from lmlab.kernels.linear import onednn_enabled

    facts = machine(threads=2, onednn_fp32_by_default=onednn_enabled(),
                    load_average=os.getloadavg(), shape=args.shape, **vars(shape))
    if device.type == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(device)
    write_results(args.out, {"machine": facts, "rows": rows})


if __name__ == "__main__":
    main()
