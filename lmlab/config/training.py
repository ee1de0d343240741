"""Training configuration: typed, frozen dataclasses, validated at the edge.

`LoopConfig` holds what every kind of training shares (optimisation, precision, evaluation,
checkpoints, logging); `TrainConfig` adds what pre-training needs. A field whose type is
itself a configuration dataclass (the objective's options) is grouped in code but flat for
users: `--mlm-rate 0.3` on the command line, `mlm_rate: 0.3` in a file.

Parsing (defaults → a YAML or TOML file → command-line overrides) is generic: lmlab.config.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, replace
from typing import Literal, TypeVar

from lmlab.config.budget import DEADLINE_VALIDATIONS, Budget
from lmlab.config.fields import check_choices, documented
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.rtd_recipe import ELECTRA_WARMUP_SHARE, RTD_RECIPES

# The warm-ups of what a step reads start at 1/WARMUP_START_DIVISOR of the full size.
WARMUP_START_DIVISOR = 4
# Steps between validations when neither the run nor its time budget decides.
EVAL_EVERY_STEPS = 200
# Experiment trackers --report-to feeds (Hugging Face's names); lmlab/train/trackers.py.
TRACKERS = ("tensorboard", "mlflow", "trackio", "wandb")


def trackers_named(report_to: str | None) -> tuple[str, ...]:
    """`tensorboard,mlflow` → ("tensorboard", "mlflow"); an unknown name is refused."""
    names = tuple(dict.fromkeys(name.strip() for name in (report_to or "").split(",")
                                if name.strip()))
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"report_to: unknown tracker {name!r}; choose from "
                             f"{', '.join(TRACKERS)} (comma-separated)")
    return names


Optimizer = Literal["auto", "adamw", "muon"]
_OPTIMIZERS = ("adamw, or muon: Muon for the blocks' weight matrices, AdamW for embeddings, "
               "heads, norms and biases, at the same learning rate")
_WHERE_MUON_RUNS = "muon where it runs (not with --distributed fsdp or --precision fp16)"
OPTIMIZER_HELP = f"{_OPTIMIZERS}; auto = {_WHERE_MUON_RUNS}, else adamw"
PRETRAIN_OPTIMIZER_HELP = (f"{_OPTIMIZERS}; auto = adamw for objectives that only read both "
                           f"ways (mlm, mlm+nsp, mntp, rtd), else {_WHERE_MUON_RUNS}")
ScheduleName = Literal["cosine", "linear", "constant", "wsd"]
SCHEDULE_HELP = "learning-rate decay after warm-up (wsd = warmup-stable-decay)"


def muon_runs_with(distributed: str, precision: str) -> bool:
    """Muon's update is neither sharded (FSDP2) nor unscaled by a loss scaler (fp16)."""
    return distributed != "fsdp" and precision != "fp16"


@dataclass(frozen=True)
class LoopConfig:
    out: str | None = documented(None, "the run directory")
    batch_size: int = documented(32, "sequences per optimiser step, across all ranks")
    micro_batch_size: int | None = documented(
        None, "sequences per rank and forward pass (gradient accumulation makes up the "
        "rest); none = batch size / ranks")
    lr: float = documented(1e-3, "peak learning rate")
    schedule: ScheduleName = documented("cosine", SCHEDULE_HELP)
    warmup_steps: int | None = documented(None, "linear warm-up; none = 5% of the run, at "
                                                "most 1000 steps")
    lr_floor: float = documented(0.1, "final learning rate as a fraction of the peak")
    optimizer: Optimizer = documented("adamw", OPTIMIZER_HELP)
    muon_momentum_warmup_steps: int = documented(
        0, "with --optimizer muon: its momentum rises linearly from 0.85 to 0.95 over this "
           "many steps (modded-nanogpt); 0 = 0.95 throughout")
    weight_decay: float = documented(0.1, "weight decay (not on norms, biases, embeddings)")
    embedding_lr_scale: float | None = documented(
        None, "the embeddings' learning rate as a multiple of --lr; none = 1")
    beta2: float = documented(0.95, "AdamW's second-moment decay")
    grad_clip: float = documented(1.0, "clip the gradient's global norm to this")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = documented(
        "auto", "compute precision (bf16/fp16: autocast; weights stay fp32); auto = bf16 on a "
                "GPU with bf16 tensor cores, else fp32")
    compile: bool | None = documented(
        None, "compile the model with torch.compile (--compile, --compile false); none = auto: "
              "on a CUDA GPU, not on the CPU")
    activation_checkpointing: bool = documented(
        False, "recompute each block's activations in the backward pass instead of keeping "
               "them: less memory for about a third more compute")
    max_nonfinite_steps: int = documented(
        5, "stop after this many consecutive steps with a non-finite loss (each is skipped)")
    eval_every: int | None = documented(
        None, f"steps between validations; none = every {EVAL_EVERY_STEPS} steps, or "
              f"{DEADLINE_VALIDATIONS} times spread over a --minutes budget")
    checkpoint_every: int = documented(500, "steps between checkpoints (also saved at the "
                                            "end, on the best validation and when stopped)")
    keep_last: int = documented(2, "checkpoints kept besides the best one")
    log_every: int = documented(10, "steps between log lines in metrics.jsonl")
    report_to: str | None = documented(
        None, "also send the metrics to these trackers, comma-separated: tensorboard, mlflow, "
              "trackio, wandb (offline; each needs pip install 'lmlab[NAME]'); none = "
              "metrics.jsonl only")
    seed: int = documented(0, "initial weights, data order and every random choice")
    distributed: Literal["ddp", "fsdp"] = documented(
        "ddp", "under torchrun: DDP, or FSDP2 (fully_shard) to shard weights and optimizer")
    patience: int | None = documented(
        None, "stop early after this many validations in a row without a new best")
    resume: bool = documented(False, "continue the run in --out exactly where it stopped")
    overwrite: bool = documented(False, "replace the run in --out")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("batch_size", "eval_every", "checkpoint_every", "log_every", "patience"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lr is not None and (not math.isfinite(self.lr) or self.lr <= 0):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        scale = self.embedding_lr_scale
        if scale is not None and (not math.isfinite(scale) or scale <= 0):
            raise ValueError(f"embedding_lr_scale must be a positive number, got {scale}")
        if self.muon_momentum_warmup_steps < 0:
            raise ValueError(f"muon_momentum_warmup_steps must be 0 or more, got "
                             f"{self.muon_momentum_warmup_steps}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be 0 or more, got {self.warmup_steps}")
        trackers_named(self.report_to)  # their packages: lmlab.extras.require_trackers, once
        if self.optimizer == "muon" and not self.muon_runs:
            raise ValueError("--optimizer muon works with DDP and fp32 or bf16; use "
                             "--optimizer adamw with --distributed fsdp or --precision fp16")
        if self.resume and self.overwrite:
            raise ValueError("choose --resume or --overwrite, not both")

    @property
    def muon_runs(self) -> bool:
        return muon_runs_with(self.distributed, self.precision)

    def concrete(self: C, precision: str, compile: bool, optimizer: str) -> C:
        """The config a run trains with, as config.json records it: the precision, compile and
        optimizer resolved where the run's device and objective are known (lmlab/train/
        setup.py), and the learning rate and the embeddings' multiple of it as numbers."""
        if self.muon_momentum_warmup_steps and optimizer != "muon":
            raise ValueError(f"--muon-momentum-warmup-steps warms up Muon's momentum, but the "
                             f"run trains with {optimizer}: add --optimizer muon, or leave it "
                             "out")
        scale = self.embedding_lr_scale
        return replace(self, precision=precision, compile=compile, optimizer=optimizer,
                       lr=self._lr_default() if self.lr is None else self.lr,
                       embedding_lr_scale=self._embedding_lr_default() if scale is None else scale)

    def _lr_default(self) -> float:
        return LoopConfig.lr

    def _embedding_lr_default(self) -> float:
        return 1.0

    def to_dict(self) -> dict:
        return asdict(self)


C = TypeVar("C", bound=LoopConfig)
# The peak learning rate of a run that continues --init weights (TrainConfig._lr_default).
CONTINUED_LR = 1e-4


@dataclass(frozen=True)
class TrainConfig(LoopConfig):
    # Pre-training's own defaults for shared fields: what learned most in a fixed time
    # (benchmarks/results/time_to_quality_*.json).
    optimizer: Optimizer = documented("auto", PRETRAIN_OPTIMIZER_HELP)
    schedule: ScheduleName = documented("wsd", SCHEDULE_HELP)
    warmup_steps: int | None = documented(
        None, f"linear warm-up; none = 5% of the run, at most 1000 steps "
              f"({ELECTRA_WARMUP_SHARE:.0%} with --rtd-recipe electra)")
    lr: float | None = documented(
        None, f"peak learning rate; none = {LoopConfig.lr:g} from random weights, "
              f"{CONTINUED_LR:g} when continuing --init weights")
    embedding_lr_scale: float | None = documented(
        None, "the embeddings' learning rate as a multiple of --lr; none = 10 from random "
              "weights, 1 when continuing --init weights")
    objective: str = documented("mlm", "mlm, clm, prefix, span, mlm+nsp, mntp, "
                                       "mix:A=w,B=w, alternate:A,B@steps or "
                                       "then:A,B@fraction (A for that share of the steps, "
                                       "then B)")
    data: str | None = documented(None, "a prepared dataset; none = the built-in corpus, "
                                        "prepared once")
    model: str = documented("auto", "a preset (family-size, e.g. bert-small); auto = "
                                    "modern-mini")
    model_overrides: dict = documented(default_factory=dict,
                                       help='model config fields as JSON, e.g. '
                                            '\'{"dropout": 0.1}\'')
    init: str | None = documented(
        None, "continue pre-training from the weights of this run (RUN or RUN:CHECKPOINT; "
              "pre-trained, imported or fine-tuned), with its model and tokenizer")
    head_warmup_steps: int | None = documented(
        None, "with --init: steps that train only the heads the source lacks, its body "
              "frozen, before everything trains; none = 10% of the run when a head is new")
    seq_len: int = documented(128, "tokens per training row")
    seq_len_warmup_steps: int = documented(
        0, "training rows start at a quarter of --seq-len and grow to it over this many "
           "steps, each row cut into 4, 3, then 2 pieces: tokens per step stay about the "
           "same, in more, shorter rows; validation reads whole rows; 0 = whole rows "
           "throughout")
    batch_size_warmup_steps: int = documented(
        0, "a step reads a quarter of --batch-size at first, rising in a straight line to all "
           "of it over this many steps: the first rows of each micro-batch, the others skipped "
           "(not read later), and --tokens counting them as read; 0 = the whole batch "
           "throughout")
    untie_at: float | None = documented(
        None, "with a tied head: at this fraction of the steps the output head becomes a copy "
              "of the token embedding, trained apart from it from then on (modded-nanogpt); "
              "none = as the model is configured throughout")
    num_workers: int = documented(0, "data-loading worker processes")
    steps: int | None = documented(None, "a step budget (0 with --init: the source as it "
                                                 "came, validated and saved)")
    tokens: str | None = documented(None, "a token budget such as 20M, or chinchilla (20 × "
                                          "parameters)")
    minutes: float | None = documented(None, "a time budget; with no budget at all, 5 "
                                             "minutes")
    eval_batches: int = documented(16, "validation micro-batches per evaluation")
    objective_options: ObjectiveOptions = dataclasses.field(default_factory=ObjectiveOptions)
    rtd_recipe: Literal[tuple(RTD_RECIPES)] = documented(
        "lmlab", "rtd: lmlab's defaults, or electra: ELECTRA's settings for each field not "
        "given (" + ", ".join(f"{name} {value}" for name, value in RTD_RECIPES["electra"].items())
        + f", a {ELECTRA_WARMUP_SHARE:.0%} warm-up)")
    packing: Literal["auto", "concatenate", "best_fit"] = documented(
        "auto", "how documents fill rows: concatenated, or best-fit without splitting short "
        "ones; auto = what the objective needs")

    @property
    def budget(self) -> Budget:
        return Budget(self.steps, self.tokens, self.minutes)

    def warmup_for(self, planned_steps: int) -> int:
        """The warm-up of a run of `planned_steps`: --warmup-steps, or by default 5% of the
        run, at most 1000 steps (ELECTRA_WARMUP_SHARE of it under --rtd-recipe electra)."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.rtd_recipe == "electra":
            return int(planned_steps * ELECTRA_WARMUP_SHARE)
        return min(1000, planned_steps // 20)

    def _lr_default(self) -> float:
        """Continued weights learn at a tenth of the rate: at 1e-3 all-MiniLM-L6-v2 continued
        with masked LM lost most of what fine-tuning draws on, with or without a head warm-up
        (docs/continued-pretraining.md)."""
        return CONTINUED_LR if self.init is not None else LoopConfig.lr

    def _embedding_lr_default(self) -> float:
        """From random weights the embeddings learn at 10 times the rate (measured to learn
        more in a fixed time for both causal and masked LM); weights a run continues keep
        the one rate."""
        return 1.0 if self.init is not None else 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        # every budget is checked here, before a run directory is written, so that a corrected
        # command does not find a half-made run in its way
        if self.init is not None:
            given = [name for name, set_ in (("--model", self.model != "auto"),
                                             ("--model-overrides", bool(self.model_overrides)))
                     if set_]
            if given:
                raise ValueError(f"--init takes the model from {self.init}; leave out "
                                 f"{' and '.join(given)}, which would change it")
        if self.steps == 0 and self.init is None:
            raise ValueError("--steps 0 trains nothing; it is for --init RUN alone (the "
                             "source kept as it came, validated and saved as a run of its "
                             "own): give --steps 1 or more")
        if self.head_warmup_steps is not None and self.head_warmup_steps < 0:
            raise ValueError(f"head_warmup_steps must be 0 or more, got "
                             f"{self.head_warmup_steps}")
        if self.head_warmup_steps and self.init is None:
            raise ValueError("--head-warmup-steps trains the heads an --init run lacks; "
                             "give --init RUN, or leave it out")
        if self.rtd_recipe != "lmlab" and self.objective != "rtd":
            raise ValueError(f"--rtd-recipe {self.rtd_recipe} sets how replaced-token detection "
                             f"trains, but the objective is {self.objective}: give --objective "
                             "rtd, or leave --rtd-recipe out")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2 (a row of one token has nothing to "
                             f"predict), got {self.seq_len}")
        for name in ("seq_len_warmup_steps", "batch_size_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.seq_len_warmup_steps and self.seq_len < 2 * WARMUP_START_DIVISOR:
            raise ValueError(f"--seq-len-warmup-steps starts at a quarter of --seq-len, which "
                             f"needs a --seq-len of at least {2 * WARMUP_START_DIVISOR}, got "
                             f"{self.seq_len}")
        if self.untie_at is not None and not 0 < self.untie_at < 1:
            raise ValueError(f"untie_at is a fraction of the run's steps, between 0 and 1, "
                             f"got {self.untie_at}")
        self.budget  # noqa: B018 — checked as it is read
