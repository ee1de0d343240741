"""What `--resume` may change. A resumed run continues the run its directory holds, with that
run's settings: only how the run is watched and a longer step or token budget may differ, and
config.json then records each change with the checkpoint it took effect at."""

from __future__ import annotations

from dataclasses import asdict, replace

from lmlab.config.budget import BUDGETS
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.training import muon_runs_with
from lmlab.runs.layout import RunDirError
from lmlab.runs.opening import Opening
from lmlab.runs.schema import Resume, RunConfig

# Fields that say how a run is watched or stored, not what it learns: free on resume.
WATCHING = frozenset({"out", "resume", "overwrite", "num_workers", "log_every", "eval_every",
                      "eval_batches", "checkpoint_every", "keep_last", "patience", "compile",
                      "activation_checkpointing", "max_nonfinite_steps", "report_to"})
# Fields added after runs were saved without them, and what such a run trained with (objective
# options added since: their defaults, _options_filled).
SAVED_BEFORE = {"embedding_lr_scale": 1.0, "muon_momentum_warmup_steps": 0,
                "seq_len_warmup_steps": 0, "batch_size_warmup_steps": 0,
                "rtd_recipe": "lmlab"}


def resumed_config(opening: Opening, config: RunConfig,
                   budgets: tuple[str, ...] = BUDGETS) -> RunConfig:
    """The configuration a `--resume` of the run `opening` found continues with: the saved
    run's, with `config`'s changes to watching fields and `budgets` applied, each change
    recorded (a budget left out on resume is the saved one; a step or token budget may grow).
    Any other change is refused in one line naming the fields."""
    out, saved = opening.out, opening.saved
    filled = {name: value for name, value in SAVED_BEFORE.items()
              if saved.train.get(name) is None and config.train.get(name) is not None}
    saved = replace(saved, train={**saved.train, **filled, **_options_filled(saved.train),
                                  "optimizer": trained_optimizer(saved.train)})
    asked = dict(config.train)
    if not any(asked.get(name) is not None for name in budgets):
        asked.update({name: saved.train.get(name) for name in budgets})
    changed = {name: (saved.train.get(name), value) for name, value in asked.items()
               if saved.train.get(name) != value and name not in WATCHING}
    refused = {name: pair for name, pair in changed.items() if name not in budgets}
    if asked.get("minutes") is not None and "minutes" in changed:
        refused["minutes"] = changed["minutes"]  # a time budget's plan was made at its start
    if refused:
        details = ", ".join(f"{name} {old} → {new}" for name, (old, new) in refused.items())
        raise RunDirError(f"--resume continues the run in {out} with its own settings, but "
                          f"this command changes {details}; only a longer --steps or --tokens "
                          "and how the run is logged, validated and saved may change (or "
                          "use --overwrite, or another --out)")
    history = saved.resumes
    if changed:
        newest = opening.checkpoint
        history = (*history, Resume(newest.name if newest else None, changed))
    return replace(config, train=asked, resumes=history)


def _options_filled(saved: dict) -> dict:
    """The saved objective options with those added since at their defaults, which the run
    trained with (nothing when the run grouped no options)."""
    options = saved.get("objective_options")
    if not isinstance(options, dict):
        return {}
    return {"objective_options": {**asdict(ObjectiveOptions()), **options}}


def trained_optimizer(saved: dict) -> str | None:
    """The optimizer a saved run trained with. Runs saved before config.json recorded the
    resolved one hold "auto", which then meant Muon wherever it ran."""
    if saved.get("optimizer") != "auto":
        return saved.get("optimizer")
    ran = muon_runs_with(saved.get("distributed", "ddp"), saved.get("precision", "fp32"))
    return "muon" if ran else "adamw"
