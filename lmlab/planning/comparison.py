"""`lmlab plan --objectives ...`: how many steps each run of an `lmlab compare` gets, so that
the whole comparison fits a budget in minutes on this machine.

A comparison spends most of a small budget outside training: every run is validated, scored
on held-out text and fine-tuned on each probe once per probe seed, and the control (`none`,
with --init) is scored and probed without training at all. So the plan times a training
step of the model under each objective (lmlab.planning.sizing, as a one-run plan does; a
sparse masked-LM head or a generator makes one objective's step dearer than another's) and one
forward pass, and prices the rest from their costs per token:

- validation: at the start of a continued run and at its end, on the run's text and, for a
  continued run, on general text too;
- held-out scoring: each scored token once under a true likelihood, and under a pseudo
  likelihood (masked objectives) once per token of its window, each token masked in turn;
- each probe: its training tokens once per epoch, its validation tokens once per epoch and
  its test tokens once, per probe seed, the files' tokens counted at the dataset's bytes per
  token.

What is left after those fixed costs, shared over the runs' steps, gives the steps per run.
These are estimates from timed steps: the command's own clock is the judge, and the plan
says how long it thinks each part takes so that a user sees what to trim."""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.config import ModelConfig
from lmlab.config.objective_options import CONTROL
from lmlab.config.presets import preset
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import Dataset
from lmlab.data.preparation.entry import open_or_prepare
from lmlab.eval.rules import rules_for
from lmlab.model import LanguageModel
from lmlab.model.masks import MaskSpec
from lmlab.objectives.registry import build_objective
from lmlab.planning.sizing import Plan, plan
from lmlab.runs.layout import CONFIG, split_init
from lmlab.runs.schema import read_run_config
from lmlab.tasks.named import NamedTask


@dataclass(frozen=True)
class ComparisonPlan:
    minutes: float  # the whole comparison's budget
    runs: int  # pre-training runs that train (objectives × seeds × fractions)
    control: bool  # whether `none` is scored and probed besides
    seconds_per_step: float | None  # the objectives' steps' mean (None: one was not timed)
    fixed_minutes: dict[str, float]  # validation, scoring and probes, over every run
    steps: int  # per run at the full budget (0: the budget holds no step)
    training_minutes: float  # every run's steps, each fraction's run its share
    needed_minutes: float | None  # when no step fits: the fixed costs and one step per run
    command: str
    run_plan: Plan  # a one-run plan: the first objective's, or one whose step was not timed

    def to_dict(self) -> dict:
        return {**{name: value for name, value in asdict(self).items() if name != "run_plan"},
                "run_plan": self.run_plan.to_dict()}

    def describe(self) -> str:
        fixed = ", ".join(f"{name} {value:.1f}" for name, value in self.fixed_minutes.items())
        lines = [f"a comparison in {self.minutes:g} minutes: {self.runs} training runs"
                 + (" and the control" if self.control else ""),
                 f"  outside training (estimated minutes): {fixed}"]
        if self.seconds_per_step is None:
            lines.append("  no training step could be timed here: see the run plan's warnings")
        elif self.steps:
            lines.append(f"  training: {self.steps} steps a run at {self.seconds_per_step:.2f} s "
                         f"a step (the objectives' mean), {self.training_minutes:.1f} minutes "
                         "in all")
        else:
            lines.append(f"  the budget holds no training step: about {self.needed_minutes:.0f} "
                         "minutes would hold one a run; fewer probe seeds, probes or "
                         "--eval-tokens cost less")
        return "\n".join([*lines, "", "run:", f"  {self.command}"])


def plan_comparison(minutes: float, objectives: Sequence[str], *, model: str = "modern-mini",
                    init: str | None = None, data: str | None = None, seq_len: int,
                    batch_size: int, precision: str, seeds: int, fractions: Sequence[float],
                    probes: Sequence[NamedTask], probe_seeds: int, probe_epochs: float,
                    eval_tokens: int, eval_batches: int = TrainConfig.eval_batches,
                    extra: Sequence[str] = ()) -> ComparisonPlan:
    """Steps per run for `lmlab compare --objectives OBJECTIVES --match steps` to fit
    `minutes`, every objective training `model` (or continuing `init`); `extra` are compare's
    further arguments, passed on to its command as given."""
    trained = [spec for spec in objectives if spec != CONTROL]
    if not trained:
        raise ValueError("--objectives: give at least one objective besides none")
    steps_each, run_plan = _timed_steps(trained, minutes, model=model, init=init, data=data,
                                        seq_len=seq_len, batch_size=batch_size,
                                        precision=precision)
    step = float(np.mean(steps_each)) if all(steps_each) else None
    runs = len(trained) * seeds * len(fractions)
    control = CONTROL in objectives
    fixed = {}
    if step:
        dataset = open_or_prepare(data)
        model_cfg = (read_run_config(split_init(init)[0] / CONFIG).model if init
                     else preset(model, dataset.special.vocab_size, seq_len))
        # a probe fine-tunes a classifier whatever the objective: the cheapest step prices it
        costs = Costs(min(steps_each) / (seq_len * batch_size),
                      forward_seconds_per_token(model_cfg), dataset, model_cfg.max_seq_len)
        probing = probe_seeds * sum(costs.probe(probe, probe_epochs) for probe in probes)
        fixed = _fixed_seconds(costs, trained, seeds * len(fractions), control, init,
                               eval_batches * seq_len * batch_size, eval_tokens, probing)
    step_runs = len(trained) * seeds * sum(fractions)  # each fraction a run of its share
    fewest = math.floor(0.5 / min(fractions)) + 1  # the least whose smallest share rounds to 1
    left = minutes * 60 - sum(fixed.values())
    steps = math.floor(left / (step_runs * step)) if step else 0
    steps = steps if steps >= fewest else 0
    needed = (None if steps or not step
              else (sum(fixed.values()) + step_runs * fewest * step) / 60)
    command = ["lmlab", "compare", "--objectives", ",".join(objectives),
               *(["--init", str(init)] if init else ["--model", model]),
               "--match", "steps", "--budget", str(max(steps, fewest)), "--seeds", str(seeds),
               "--fractions", ",".join(f"{f:g}" for f in fractions),
               "--seq-len", str(seq_len), "--batch-size", str(batch_size), *extra]
    return ComparisonPlan(minutes, runs, control, step,
                          {name: seconds / 60 for name, seconds in fixed.items()},
                          steps, step_runs * steps * (step or 0) / 60, needed,
                          shlex.join(command), run_plan)


def _timed_steps(trained: Sequence[str], minutes: float, *, model: str, init: str | None,
                 **settings) -> tuple[list[float | None], Plan]:
    """The one model every run trains, its step timed under each objective (None where it
    could not be), and the one-run plan to show: the first objective's, or the first whose
    step could not be timed."""
    family, _, size = model.rpartition("-")
    one_runs = [plan(spec, minutes=minutes, init=init, **settings,
                     **({} if init else {"family": family, "sizes": [size]}))
                for spec in trained]
    steps_each = [one_run.candidates[0].seconds_per_step
                  or one_run.candidates[0].estimated_seconds_per_step for one_run in one_runs]
    shown = next((one_run for one_run, step in zip(one_runs, steps_each, strict=True)
                  if not step), one_runs[0])
    return steps_each, shown


def _fixed_seconds(costs: Costs, trained: Sequence[str], runs_each: int, control: bool,
                   init: str | None, block: int, eval_tokens: int,
                   probing: float) -> dict[str, float]:
    """Seconds outside training, by part, over the `runs_each` runs of every objective and
    the control: each run scored under its own objective's rules, the control as the first
    one's; `probing` is one run's probes."""
    scoring = [costs.scoring([spec], eval_tokens) for spec in trained]
    runs = runs_each * len(trained)
    return {"validation": runs * costs.validation(block, init)
            + control * costs.validation(block, init, trained=False),
            "held-out scoring": runs_each * sum(scoring) + control * scoring[0],
            "probes": (runs + control) * probing}


@dataclass(frozen=True)
class Costs:
    """Seconds a scored run spends outside training, by part, from a training step's cost per
    token (`per_token`) and a forward pass's (`forward`), on `dataset`, for a model of
    `context` tokens."""

    per_token: float
    forward: float
    dataset: Dataset
    context: int

    def validation(self, tokens: int, init: str | None, trained: bool = True) -> float:
        """At the end of a run that trains; a continued run also at its start, and on
        general text each time."""
        times = int(trained) + bool(init)
        return times * (2 if init else 1) * tokens * self.forward

    def scoring(self, objectives: Sequence[str], eval_tokens: int) -> float:
        """Each scoring rule of the objectives once: a true likelihood reads each token once,
        a pseudo likelihood a window (the model's context, or the document if shorter) per
        token."""
        rules = {rule.name: rule for spec in objectives for rule in rules_for(
            build_objective(spec, self.dataset.special, word_starts=self.dataset.word_starts),
            self.dataset.special)}
        spans = self.dataset.validation.document_spans()
        document = float(np.mean(spans[:, 1] - spans[:, 0])) if len(spans) else 1.0
        window = min(document, self.context)
        return sum(eval_tokens * self.forward
                   * (1 if rule.perplexity_name == "perplexity" else window)
                   for rule in rules.values())

    def probe(self, probe: NamedTask, epochs: float) -> float:
        """One fine-tuning of `probe`: its training tokens each epoch, its validation tokens
        after each epoch, its test tokens once, each counted from its file's size."""
        train, validate, test = (0.0 if path is None
                                 else Path(path).stat().st_size / self.dataset.bytes_per_token
                                 for path in (probe.train, probe.validation, probe.test))
        return epochs * train * self.per_token + (math.ceil(epochs) * validate + test) * (
            self.forward)


def forward_seconds_per_token(model_cfg: ModelConfig, rows: int = 32, repeats: int = 2) -> float:
    """A forward pass's seconds per token through a model of `model_cfg` (its weights do not
    change the time), the fastest of `repeats` after a warm-up, on rows of up to 128 tokens
    (a few thousand tokens a pass, as scoring batches them)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # as scoring runs
    length = min(model_cfg.max_seq_len, 128)
    model = LanguageModel(model_cfg).to(device).eval()
    ids = torch.randint(model_cfg.vocab_size, (rows, length), device=device)  # (rows, length)
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):
            start = time.perf_counter()
            model(ids, MaskSpec("bidirectional"))
            if device.type == "cuda":  # kernels run asynchronously: wait for them
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    return min(times[1:]) / ids.numel()
