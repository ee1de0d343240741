"""`lmlab plan`: size a pre-training run for a budget before spending it."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from lmlab.command_line import add_command, add_config_options
from lmlab.compare.scaling import CHINCHILLA
from lmlab.presets import FAMILIES, SIZES
from lmlab.train.config import TrainConfig, field_specs, parse_value

# The pretrain options a plan shares, with their help and defaults.
TRAINING_OPTIONS = ("objective", "data", "seq_len", "batch_size", "precision")


def add_compare_commands(commands: argparse._SubParsersAction) -> None:
    fit = ", ".join(f"{name}={value}" for name, value in asdict(CHINCHILLA).items())
    parser = add_command(
        commands, "plan", help="choose a model size for a pre-training budget",
        handler=plan_command,
        description="Time each candidate model size for a few training steps of the objective "
                    "on this machine, then show per size its parameters, FLOPs per token, "
                    "speed, the tokens the budget reaches, the passes over the data and the "
                    "loss predicted by a Chinchilla fit (Besiroglu et al. 2024's refit of "
                    f"Hoffmann et al. 2022: {fit}; fitted to causal LMs on MassiveText with "
                    "its tokenizer, so across objectives and tokenizers the loss compares "
                    "sizes and is no promise), the fit's compute-optimal size, and the lmlab "
                    "pretrain command for the candidate closest to it.")
    specs = field_specs(TrainConfig)
    add_config_options(parser, {name: specs[name] for name in TRAINING_OPTIONS})
    budget = parser.add_argument_group("budget (exactly one)")
    budget.add_argument("--minutes", type=float, help="training time on this machine")
    budget.add_argument("--flops", help="training FLOPs, e.g. 1e18")
    budget.add_argument("--tokens", help="training tokens, e.g. 20M")
    parser.add_argument("--family", default="auto", choices=("auto", *FAMILIES),
                        help="the preset family; auto = bert for objectives that only read "
                             "bidirectionally, else gpt2 (as pretrain --model auto)")
    parser.add_argument("--sizes", help=f"comma-separated preset sizes (default: all, "
                                         f"{','.join(SIZES)})")
    parser.add_argument("--steps-to-time", type=int, default=3,
                        help="timed training steps per size, after one warm-up step")
    parser.add_argument("--out", type=Path, help="also write the plan here as JSON")


def plan_command(args: argparse.Namespace) -> int:
    import torch

    from lmlab.compare.plan import plan
    from lmlab.compare.plan_table import format_plan
    from lmlab.eval.report import write_json
    from lmlab.train.allocator import keep_freed_memory

    if not torch.cuda.is_available():
        keep_freed_memory()  # as pretrain does, so that steps are timed as it will run them
    training = {name: parse_value(name, getattr(args, name)) for name in TRAINING_OPTIONS
                if getattr(args, name) is not None}
    result = plan(**training, minutes=args.minutes, flops=args.flops, tokens=args.tokens,
                  family=args.family, sizes=args.sizes, steps_to_time=args.steps_to_time)
    print(format_plan(result))
    if args.out:
        write_json(result.to_dict(), args.out)
        print(f"plan written to {args.out}")
    return 0
