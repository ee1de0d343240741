"""`lmlab pretrain`: set up a pre-training run, then hand it to the one loop (loop.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lmlab.config import ModelConfig
from lmlab.config.budget import Budget
from lmlab.config.parsing import resolve_config
from lmlab.config.presets import preset
from lmlab.config.training import EVAL_EVERY_STEPS, TrainConfig
from lmlab.data.dataset import Dataset
from lmlab.data.general_text import general_text
from lmlab.data.loader import BlockBatches
from lmlab.data.preparation.entry import open_or_prepare
from lmlab.data.special_tokens import SpecialTokens
from lmlab.model import LanguageModel
from lmlab.model.flops import objective_flops_per_token
from lmlab.objectives.base import Objective
from lmlab.objectives.batch import Batch
from lmlab.objectives.registry import build_objective, check_before_data
from lmlab.runs.layout import seen_from_run, trained_steps
from lmlab.runs.metrics import GENERAL_TEXT
from lmlab.runs.schema import InitRecord, RunConfig
from lmlab.train import distributed
from lmlab.train.checkpoint import LoopState
from lmlab.train.deadline import Deadline, deadline_eval_batches
from lmlab.train.growth import WHOLE_ROWS, GrowingRows
from lmlab.train.head_warmup import HeadWarmup
from lmlab.train.loop import run_training, step_seed
from lmlab.train.objective_plan import ObjectivePlan, plan_objective
from lmlab.train.prefetch import PrefetchedData
from lmlab.train.schedule import Schedule
from lmlab.train.setup import (
    begin,
    budget_steps,
    micro_batches_per_step,
    open_run,
    resolve,
    start,
    time_budget,
    training,
)
from lmlab.train.step import one_step_seconds
from lmlab.train.untie import check_untie
from lmlab.train.validation import ValidationWarnings, headline_loss, validate
from lmlab.train.warm_start import (
    NEW_WEIGHTS_LR,
    InitSource,
    check_head_warmup,
    checked_source,
    head_warmup_steps,
    heads_it_lacks,
    say_how_it_starts,
    warm_started_model,
)


class PretrainingData:
    """Micro-batches of packed blocks, each read as `rows` says at the step and made into the
    objective's batch."""

    def __init__(self, blocks: BlockBatches, objective: Objective, accumulation: int,
                 num_workers: int, rows: GrowingRows = WHOLE_ROWS) -> None:
        self.blocks, self.objective, self.accumulation = blocks, objective, accumulation
        self.rows = rows
        self.stream = iter(DataLoader(blocks, batch_size=None, num_workers=num_workers))
        self.last = None

    def micro_batches(self, step: int, generator: torch.Generator) -> list[Batch]:
        batches = []
        for _ in range(self.accumulation):
            self.last = next(self.stream)
            tokens = self.rows.of(self.last.tokens, step)
            batches.append(self.objective.make_batch(tokens, generator, step))
        return batches

    def state_dict(self) -> dict:
        return self.blocks.state_dict(self.last)


def pretrain_with_settings(config: Path | None, fields: dict) -> Path:
    """Pre-train from a config file and/or fields by name; with no `data`, on the built-in
    corpus. Returns the run directory."""
    cfg = resolve_config(config, fields, TrainConfig)
    check_before_data(cfg)
    return pretrain(cfg, open_or_prepare(cfg.data))


def pretrain(cfg: TrainConfig, dataset: Dataset) -> Path:
    """Pre-train as `cfg` says on `dataset`; returns the run directory."""
    env, out = begin(cfg.seed), Path(cfg.out or f"runs/{cfg.objective.replace(':', '-')}")
    # With --init the tokenizer is the source's, checked against the data once it is read.
    opening = open_run(cfg, env, out, tokenizer_json=None if cfg.init else dataset.tokenizer_json)
    if opening.kind == "finished":
        return out
    source, special = _init_source(cfg, dataset)
    objective = build_objective(cfg.objective, special, cfg.objective_options, dataset.word_starts)
    cfg = resolve(cfg, env, opening, objective.reads_only_bidirectionally)
    plan = plan_objective(objective, cfg, special)
    model = _starting_model(cfg, plan, objective, special, source).to(env.device)
    new_heads = _checked_new_heads(cfg, env, plan, source)
    check_untie(cfg.untie_at, model, env.distributed, cfg.tokens)
    # Everything that can refuse the run does so before its directory is written.
    micro_size, accumulation = micro_batches_per_step(cfg, env)
    blocks, validation_blocks = _block_batches(cfg, env, dataset, plan, micro_size)
    started = start(cfg, env, opening, _run_config(cfg, out, dataset, model.cfg, source), model,
                    dataset.tokenizer_json if source is None else source.tokenizer_json,
                    before_writing=lambda config: _refuse_a_passed_budget(
                        Budget.of(config.train), cfg, model, trained_steps(out)))
    budget, state = Budget.of(started.config.train), started.state  # a resume's budgets
    planned_steps = state.total_steps  # of the run resumed, if any
    if state.data:
        blocks.load_state_dict(state.data)
    state.total_steps = (_resumed_steps(budget, cfg, model, state) if planned_steps else
                         _all_ranks_steps(budget, cfg, env, model, objective, special,
                                          micro_size, accumulation))
    objective = _for_the_run(cfg, env, objective, state.total_steps)
    cap = _step_cap(budget, cfg, model)
    deadline = time_budget(budget.time_limit(cap), cap, cfg.eval_every, started.resumed)
    eval_count = _eval_count(cfg, deadline, state.total_steps * accumulation)
    texts = [("", _first_blocks(validation_blocks, eval_count), dataset.bytes_per_token),
             *_general_text(cfg, env, plan, source, micro_size, eval_count)]
    schedule, head_warmup = _schedule(cfg, env, model, source, plan, new_heads,
                                      planned_steps, state)
    data, made_ahead = _step_data(cfg, env, blocks, objective, accumulation)
    with made_ahead:
        run_training(training(
            cfg, env, model, out, started, objective=objective, data=data,
            schedule=schedule, head_warmup=head_warmup, untie_at=cfg.untie_at,
            validate=_validation(model, plan, env, cfg.precision, texts),
            validate_at_start=source is not None,
            warnings=ValidationWarnings(plan.eval_objectives),
            headline=headline_loss, deadline=deadline, title=_title(cfg, plan),
            eval_every=cfg.eval_every or EVAL_EVERY_STEPS, checkpoint_every=cfg.checkpoint_every,
            flops_per_token=objective_flops_per_token(model.cfg, cfg.seq_len, objective,
                                                      micro_size)))
    distributed.teardown()
    return out


def _for_the_run(cfg: TrainConfig, env: distributed.Env, objective: Objective,
                 steps: int) -> Objective:
    """The objective as a run of `steps` steps trains it (a schedule over the run), having
    said before training what lmlab measured it to do in a run of this length."""
    if env.is_main:
        for line in objective.budget_warnings(steps * cfg.batch_size * cfg.seq_len):
            print(f"warning: {line}")
    return objective.for_run(steps)


def _step_data(cfg: TrainConfig, env: distributed.Env, blocks: BlockBatches,
               objective: Objective, accumulation: int):
    """(the loop's step data, a context that stops it): on a GPU, the batches made ahead in a
    background thread and pinned there (lmlab/train/prefetch.py); on the CPU, whose cores
    the step itself keeps busy, made by the loop as it needs them."""
    data = PretrainingData(blocks, objective, accumulation, cfg.num_workers,
                           GrowingRows(cfg.seq_len_warmup_steps, cfg.batch_size_warmup_steps))
    if env.device.type != "cuda":
        return data, contextlib.nullcontext()
    ahead = PrefetchedData(data, lambda step: step_seed(cfg.seed, env.rank, step), pin=True)
    return ahead, contextlib.closing(ahead)


def _block_batches(cfg: TrainConfig, env: distributed.Env, dataset: Dataset,
                   plan: ObjectivePlan, micro_size: int) -> tuple[BlockBatches, BlockBatches]:
    """The training and validation splits as blocks of `micro_size` rows for this rank, laid
    out as the objective reads them (packed or one document a row)."""
    return _split_blocks(cfg, env, plan, micro_size, dataset.special.sep,
                         ((dataset.train, cfg.seed), (dataset.validation, 0)))


def _split_blocks(cfg: TrainConfig, env: distributed.Env, plan: ObjectivePlan, micro_size: int,
                  sep: int | None, splits) -> tuple[BlockBatches, ...]:
    """Each (split, seed) of `splits` as blocks of `micro_size` rows for this rank."""
    return tuple(BlockBatches(split, cfg.seq_len, micro_size, plan.packing, plan.pad_id,
                              sep, seed, env.rank, env.world_size)
                 for split, seed in splits)


def _general_text(cfg: TrainConfig, env: distributed.Env, plan: ObjectivePlan,
                  source: InitSource | None, micro_size: int, count: int) -> list[tuple]:
    """For a continued run on text of its own, general text in the source's vocabulary (what
    it forgets is measured there) as validation's (metric prefix, blocks, bytes per token);
    none without --init, on the built-in corpus itself, or for a source with no tokenizer."""
    if source is None or cfg.data is None or source.tokenizer_json is None:
        return []
    needed = count * micro_size * cfg.seq_len * env.world_size
    text = general_text(source.tokenizer_json, source.run.special, needed)
    (blocks,) = _split_blocks(cfg, env, plan, micro_size, text.special.sep,
                              ((text.validation, 0),))
    return [(GENERAL_TEXT, _first_blocks(blocks, count), text.bytes_per_token)]


def _validation(model: LanguageModel, plan: ObjectivePlan, env: distributed.Env,
                precision: str, texts: list[tuple]) -> Callable[[], dict[str, float]]:
    """Validation of `model` on each (metric prefix, blocks, bytes per token) of `texts`."""
    def validation() -> dict[str, float]:
        return {prefix + key: value for prefix, blocks, bytes_per_token in texts
                for key, value in validate(model, plan.eval_objectives, blocks,
                                           bytes_per_token, env, precision).items()}
    return validation


def _checked_new_heads(cfg: TrainConfig, env: distributed.Env, plan: ObjectivePlan,
                       source: InitSource | None) -> tuple[str, ...]:
    """The heads a continued run adds to its source, its head warm-up checked against them."""
    new_heads = heads_it_lacks(plan.heads, source)
    check_head_warmup(cfg.head_warmup_steps, cfg.init, cfg.objective, env.distributed,
                      new_heads)
    return new_heads


def _schedule(cfg: TrainConfig, env: distributed.Env, model: LanguageModel,
              source: InitSource | None, plan: ObjectivePlan, new_heads: tuple[str, ...],
              planned_steps: int, state: LoopState) -> tuple[Schedule, HeadWarmup | None]:
    """The learning-rate schedule and a continued run's head warm-up (new heads alone at the
    rate new weights learn at, then the body's own warm-up), as said at the start; warm-ups
    of the run's own plan (`planned_steps`, a resumed run's; 0 for a new run), even when a
    resume lengthens it. The head warm-up's length is fixed at the start and kept by a resume
    (none for one saved before head warm-ups)."""
    if state.head_warmup_steps is None:
        state.head_warmup_steps = 0 if planned_steps else head_warmup_steps(
            cfg.head_warmup_steps, env.distributed, new_heads, state.total_steps)
    planned_steps = planned_steps or state.total_steps
    head_warmup = HeadWarmup.of(model, new_heads, state.head_warmup_steps)
    head_steps = head_warmup.steps  # none where a new head has nothing of its own to train
    if env.is_main:
        say_how_it_starts(source, plan.heads, head_steps, state.total_steps)
    warmup = min(cfg.warmup_for(max(0, planned_steps - head_steps)), state.total_steps)
    schedule = Schedule(cfg.schedule, state.total_steps, warmup, cfg.lr_floor,
                        held_steps=head_steps, held_level=NEW_WEIGHTS_LR / cfg.lr)
    return schedule, head_warmup if head_steps else None


def _first_blocks(batches: BlockBatches, count: int) -> list:
    """The token blocks of the first `count` batches (all of them, if fewer)."""
    return [batches.batch(i).tokens for i in range(min(count, batches.batches_per_epoch))]


def _init_source(cfg: TrainConfig, dataset: Dataset
                 ) -> tuple[InitSource | None, SpecialTokens]:
    """The run --init starts from (none without it), checked against the context asked for
    and the dataset's tokenizer; and the special tokens the run reads (the source's roles)."""
    if cfg.init is None:
        return None, dataset.special
    source = checked_source(cfg.init, cfg.seq_len, dataset, cfg.data)
    return source, source.run.special


def _starting_model(cfg: TrainConfig, plan: ObjectivePlan, objective: Objective,
                    special: SpecialTokens, source: InitSource | None) -> LanguageModel:
    """A new model of the plan's preset, or the --init source's, with the objective's
    heads."""
    if source is None:
        model_cfg = preset(plan.preset, special.vocab_size, cfg.seq_len, **cfg.model_overrides)
        return LanguageModel(model_cfg, heads=objective.build_heads(model_cfg))
    return warm_started_model(source, objective.build_heads(source.model_cfg))


def _run_config(cfg: TrainConfig, out: Path, dataset: Dataset, model_cfg: ModelConfig,
                source: InitSource | None) -> RunConfig:
    """config.json: the settings, the model, the dataset and, with --init, the source (and
    its tokenizer's special-token names, and how it embeds: continuing a sentence-transformers
    model keeps its pooling for embed and fine-tuning)."""
    data = seen_from_run(out, dataset.path) if dataset.path else None
    if source is None:
        return RunConfig(model_cfg, cfg.to_dict(), dataset=data)
    init = InitRecord(seen_from_run(out, source.run.path), source.checkpoint,
                      source.weights_sha256)
    return RunConfig(model_cfg, cfg.to_dict(), dataset=data, init=init,
                     special_tokens=source.run.config.special_tokens,
                     embedding=source.run.config.embedding)


def _eval_count(cfg: TrainConfig, deadline: Deadline | None, micro_batches: int) -> int:
    if deadline is not None and deadline.validations:
        return deadline_eval_batches(micro_batches, cfg.eval_batches)
    return cfg.eval_batches


def _title(cfg: TrainConfig, plan: ObjectivePlan) -> str:
    """The curves plot's title: what was trained."""
    return f"{cfg.init or plan.preset} pre-trained with {cfg.objective}"


def _all_ranks_steps(budget: Budget, cfg: TrainConfig, env: distributed.Env,
                     model: LanguageModel, objective: Objective, special: SpecialTokens,
                     micro_size: int, accumulation: int) -> int:
    """The steps the budget plans, a time budget's from a timed step of random tokens."""
    steps = _step_cap(budget, cfg, model)
    return budget_steps(budget.time_limit(steps), steps, lambda: accumulation * one_step_seconds(
        model, objective, special, micro_size, cfg.seq_len, cfg.precision), env)


def _resumed_steps(budget: Budget, cfg: TrainConfig, model: LanguageModel,
                   state: LoopState) -> int:
    """The length of a resumed run: its step or token budget, which may have grown since its
    start (the schedule stretches to it); a time budget keeps the plan made at its start. Read
    from the budget, not from what config.json says changed, so a resume that was cut short
    after writing config.json still grows the run when given again."""
    steps = _step_cap(budget, cfg, model)
    return state.total_steps if budget.time_limit(steps) is not None else steps


def _refuse_a_passed_budget(budget: Budget, cfg: TrainConfig, model: LanguageModel,
                            trained: int) -> None:
    """Refuse a step or token budget below the `trained` steps of the run resumed (a budget
    equal to them ends the run there)."""
    steps = _step_cap(budget, cfg, model)
    if budget.time_limit(steps) is None and steps < trained:
        raise ValueError(f"the run has trained {trained} steps; a budget of {steps} steps "
                         "gives it nothing more to do — give a larger --steps or --tokens")


def _step_cap(budget: Budget, cfg: TrainConfig, model: LanguageModel) -> int | None:
    return budget.step_cap(model.num_parameters(), cfg.batch_size * cfg.seq_len)
