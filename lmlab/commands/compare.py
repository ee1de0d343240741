"""`lmlab plan`: size a pre-training run for a budget before spending it; `lmlab compare`:
which objective is better, on which measure, by how much and how surely."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from lmlab.commands.parsing import add_command
from lmlab.compare.design import CLUSTERS, MATCHES, CompareConfig
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.options import add_config_options
from lmlab.config.parsing import field_specs, parse_value
from lmlab.config.presets import FAMILIES, SIZES
from lmlab.config.training import TrainConfig
from lmlab.planning.scaling import CHINCHILLA
from lmlab.tasks.traits import TASKS

# The pretrain options a plan shares, with their help and defaults.
TRAINING_OPTIONS = ("objective", "data", "init", "seq_len", "batch_size", "precision")


def add_compare_commands(commands: argparse._SubParsersAction) -> None:
    _add_plan_command(commands)
    add_compare_command(commands)


def _add_plan_command(commands: argparse._SubParsersAction) -> None:
    fit = ", ".join(f"{name}={value}" for name, value in asdict(CHINCHILLA).items())
    parser = add_command(
        commands, "plan", help="choose a model size for a pre-training budget",
        handler=plan_command,
        description="Time each candidate model size for a few training steps of the objective "
                    "on this machine, spending at most 5% of the budget's time on it (at least "
                    "5 s; a size that cannot be timed in that is left untimed, and said so), "
                    "then show per size its parameters, FLOPs per token, speed, the tokens the "
                    "budget reaches, the passes over the data and how much higher a Chinchilla "
                    "fit puts its loss than the lowest among the candidates (Besiroglu et al. "
                    f"2024's refit of Hoffmann et al. 2022: {fit}; fitted to causal LMs on "
                    "MassiveText with its tokenizer, so it compares candidates and promises no "
                    "loss), the fit's compute-optimal size, and the lmlab pretrain command for "
                    "the candidate that fits closest to it, or, when none fits, for the "
                    "smallest with the time it needs. Each size's fastest step of a few is "
                    "kept, as a busy machine slows some.")
    specs = field_specs(TrainConfig)
    add_config_options(parser, {name: specs[name] for name in TRAINING_OPTIONS})
    budget = parser.add_argument_group("budget (exactly one)")
    budget.add_argument("--minutes", type=float, help="training time on this machine")
    budget.add_argument("--flops", help="training FLOPs, e.g. 1e18")
    budget.add_argument("--tokens", help="training tokens, e.g. 20M")
    parser.add_argument("--family", default="auto", choices=("auto", *FAMILIES),
                        help="the preset family; auto = modernbert for objectives that only "
                             "read bidirectionally, else modern (as pretrain --model auto)")
    parser.add_argument("--sizes", help=f"comma-separated preset sizes (default: all, "
                                         f"{','.join(SIZES)})")
    parser.add_argument("--steps-to-time", type=int, default=3,
                        help="timed training steps per size, after one warm-up step (fewer "
                             "where the timing allowance runs out)")
    parser.add_argument("--out", type=Path, help="also write the plan here as JSON")
    comparison = parser.add_argument_group(
        "sizing a comparison: with --objectives, the steps a run of `lmlab compare` gets so "
        "that the whole comparison (training, validation, held-out scoring and probes) fits "
        "--minutes; --objective, --family and --sizes are then not used")
    _add_runs_options(comparison, required=False)
    comparison.add_argument("--model", help="the preset every objective trains from random "
                                            "weights (default modern-mini)")
    _add_probe_options(comparison)


def add_compare_command(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "compare", help="compare pre-training objectives on your data",
        handler=compare_command,
        description="Pre-train every objective on the same backbone, tokenizer, data order, "
                    "context and batch, under an equal budget (training FLOPs by default), for "
                    "several seeds and budget fractions; score each run on held-out bits per "
                    "byte (pseudo bits per byte for masked and span models, never ranked "
                    "against a true likelihood), minimal pairs and fine-tuning probes; and "
                    "judge every pair of objectives with a paired hierarchical bootstrap and "
                    "Holm's correction. Sub-runs are ordinary runs under OUT/runs; the same "
                    "command again reuses every finished one. Writes OUT/report.html, PNGs and "
                    "OUT/comparison.json. With --init RUN, every objective continues RUN "
                    "instead, and none (RUN as it came) is the control each is judged "
                    "against.")
    _add_runs_options(parser, required=True)
    parser.add_argument("--budget", required=True,
                        help="per run at the full budget, in the unit of --match: FLOPs "
                             "(1e15), tokens (20M), steps or minutes")
    parser.add_argument("--match", default="flops", choices=MATCHES,
                        help="what is held equal between objectives")
    parser.add_argument("--data", help="a prepared dataset (default: the built-in corpus)")
    _add_training_options(parser)
    _add_measure_options(parser)
    _add_cluster_options(parser)


def _add_runs_options(parser, required: bool) -> None:
    """Which runs a comparison trains, for compare and for a plan of one."""
    parser.add_argument("--objectives", required=required,
                        help="comma-separated objective specs, e.g. mlm,clm,mix:clm=1,mlm=15 "
                             "(give a mixture's weights, so its parts read as one spec); "
                             "with --init, none is the control")
    parser.add_argument("--fractions", default="1/4,1/2,1",
                        help="budget fractions to run, each a run of its own")
    parser.add_argument("--seeds", type=int, default=3,
                        help="pre-training seeds per objective, paired across objectives")


def _add_training_options(parser: argparse.ArgumentParser) -> None:
    """What every sub-run pre-trains with."""
    parser.add_argument("--model", help="the one preset every objective trains from random "
                                         "weights (family-size; default modern-mini)")
    parser.add_argument("--init", metavar="RUN[:CHECKPOINT]",
                        help="compare adaptations: every objective continues this run's "
                             "weights (as pretrain --init), with its model and tokenizer; "
                             "the objective none is the run as it came, trained for nothing, "
                             "the control every adaptation is judged against")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per training row")
    parser.add_argument("--batch-size", type=int, default=32, help="rows per step")
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate; none = lmlab pretrain's (1e-3 from random "
                             "weights, 1e-4 continuing --init weights)")
    parser.add_argument("--optimizer", default="muon", choices=("adamw", "muon"),
                        help="the one optimizer every objective trains with (muon does not "
                             "run with --precision fp16)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="compute precision of pre-training and probes")
    objective = parser.add_argument_group(
        "objective options (as pretrain's; each applies to every objective it concerns)")
    add_config_options(objective, field_specs(ObjectiveOptions))


def _add_measure_options(parser: argparse.ArgumentParser) -> None:
    """How each sub-run is scored."""
    _add_probe_options(parser)
    parser.add_argument("--probe-lr", type=float,
                        help="fine-tuning learning rate (default: lmlab finetune's)")
    parser.add_argument("--pairs", nargs="+", default=[], metavar="PATH",
                        help="minimal-pair (BLiMP-format .jsonl) files or directories")
    parser.add_argument("--out", default="runs/compare", help="the comparison directory")


def _add_probe_options(parser) -> None:
    """The probes and held-out scoring of every run, for compare and for a plan of one."""
    parser.add_argument("--probe", action="append", default=[], dest="probes",
                        metavar="NAME=TASK:TRAIN:VALIDATION[:TEST]",
                        help=f"a fine-tuning probe (task: {', '.join(TASKS)}), "
                             "or NAME=FILE.yaml, an lmlab finetune config file for columns "
                             "and splits; repeat for several")
    parser.add_argument("--probe-seeds", type=int, default=1,
                        help="fine-tuning seeds per probe and pre-trained run")
    parser.add_argument("--probe-epochs", type=float, default=3.0,
                        help="fine-tuning epochs of every probe")
    parser.add_argument("--eval-tokens", type=int, default=100_000,
                        help="held-out tokens scored for bits per byte")


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """Where sub-runs train, and what reports them."""
    parser.add_argument("--workers", type=int, default=1,
                        help="sub-runs trained side by side, each in its own process")
    parser.add_argument("--cluster", default="local", choices=CLUSTERS,
                        help="where sub-runs train: local (this machine, --workers at a time) "
                             "or ray (a task each on the Ray cluster at RAY_ADDRESS; every "
                             "node must see --out, --data and the probe files at the same "
                             "paths)")
    parser.add_argument("--cpus-per-run", type=int, default=1,
                        help="with --cluster ray: CPUs (and torch threads) each sub-run holds")
    parser.add_argument("--gpus-per-run", type=int, default=0,
                        help="with --cluster ray: GPUs each sub-run holds; more than one "
                             "pre-trains it as a torchrun job on its node, a rank per GPU")
    add_config_options(parser, {"report_to": field_specs(TrainConfig)["report_to"]})


def compare_command(args: argparse.Namespace) -> int:
    from lmlab.compare.lab import compare

    options = {name: getattr(args, name) for name in (
        "data", "match", "fractions", "seeds", "model", "init", "seq_len", "batch_size", "lr",
        "optimizer", "precision", "probes", "probe_seeds", "probe_epochs", "probe_lr", "pairs",
        "eval_tokens", "out", "workers", "report_to", "cluster", "cpus_per_run",
        "gpus_per_run")}
    objective = {name: parse_value(name, getattr(args, name), ObjectiveOptions)
                 for name in field_specs(ObjectiveOptions) if getattr(args, name) is not None}
    compare(CompareConfig.of(args.objectives, budget=args.budget, objective_options=objective,
                             **options))
    return 0


def plan_command(args: argparse.Namespace) -> int:
    import torch

    from lmlab.eval.report import write_json
    from lmlab.kernels.machine import keep_freed_memory
    from lmlab.planning.sizing import plan
    from lmlab.planning.table import format_plan

    if not torch.cuda.is_available():
        keep_freed_memory()  # as pretrain does, so that steps are timed as it will run them
    training = {name: parse_value(name, getattr(args, name), TrainConfig)
                for name in TRAINING_OPTIONS if getattr(args, name) is not None}
    if args.objectives:
        result = _plan_comparison(args, training)
        print(result.describe())
    else:
        result = plan(**training, minutes=args.minutes, flops=args.flops, tokens=args.tokens,
                      family=args.family, sizes=args.sizes, steps_to_time=args.steps_to_time)
        print(format_plan(result))
    if args.out:
        write_json(result.to_dict(), args.out)
        print(f"plan written to {args.out}")
    return 0


def _plan_comparison(args: argparse.Namespace, training: dict):
    """`plan --objectives ...`: the comparison's own checks (as `lmlab compare` makes them),
    then its steps per run for --minutes."""
    from lmlab.planning.comparison import plan_comparison

    if args.minutes is None or args.flops or args.tokens:
        raise ValueError("plan --objectives sizes a comparison for --minutes only")
    cfg = CompareConfig.of(args.objectives, budget="1", match="steps", init=args.init,
                           model=args.model,
                           fractions=args.fractions, seeds=args.seeds, probes=args.probes,
                           probe_seeds=args.probe_seeds, eval_tokens=args.eval_tokens)
    given = [f"--probe={probe}" for probe in args.probes] + [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in ("probe_seeds", "probe_epochs", "eval_tokens", "data")
        if getattr(args, name) is not None]
    return plan_comparison(
        args.minutes, cfg.objectives, model=cfg.model, init=args.init, data=args.data,
        seq_len=training.get("seq_len", TrainConfig.seq_len),
        batch_size=training.get("batch_size", TrainConfig.batch_size),
        precision=training.get("precision", TrainConfig.precision), seeds=cfg.seeds,
        fractions=cfg.fractions, probes=cfg.probes, probe_seeds=cfg.probe_seeds,
        probe_epochs=args.probe_epochs, eval_tokens=cfg.eval_tokens, extra=given)
