"""`lmlab pretrain --init RUN[:CHECKPOINT]`: continued pre-training. The new run starts from the
weights of any lmlab run (pre-trained, imported, or fine-tuned: its backbone), with its model
shape and tokenizer, and a fresh optimizer, schedule and step counter.

Heads the objective needs are kept when the source has them; the others are created as their
family creates them in pre-training from scratch (LanguageModel's initialisation: weights
N(0, init_std), biases zero, norms the identity), except that a new vocabulary head's decoder
starts as the token embeddings: tied to them when the model ties its embeddings (BERT, GPT-2),
a copy of them otherwise (Llama with untied embeddings), so that a new head starts from what the
model already knows of each token rather than from noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from lmlab.config import ModelConfig
from lmlab.config.training import LoopConfig
from lmlab.model import LanguageModel
from lmlab.model.heads import HEADS, Head
from lmlab.runs import Run
from lmlab.runs.checkpoints import previous_checkpoint, weights_sha256
from lmlab.runs.layout import TOKENIZER, split_init
from lmlab.runs.run import RunLoadError, load_run

if TYPE_CHECKING:
    from lmlab.data.dataset import Dataset


class InitError(ValueError):
    """An --init that cannot be done as asked, stated in one line."""


@dataclass(frozen=True)
class InitSource:
    """The run a continued pre-training starts from: loaded (on the CPU), the checkpoint's
    name and the SHA-256 of its weights file, and its tokenizer.json as written."""

    run: Run
    given: str  # as the user wrote it
    weights_sha256: str
    tokenizer_json: str | None

    @property
    def checkpoint(self) -> str:
        return self.run.checkpoint.name

    @property
    def model_cfg(self) -> ModelConfig:
        return self.run.model.cfg


def load_source(text: str) -> InitSource:
    """The run `text` names, loaded, with its weights verified against their checksums; a
    damaged checkpoint names the one saved before it."""
    run_dir, checkpoint = split_init(text)
    try:
        run = load_run(run_dir, checkpoint)
    except RunLoadError as error:
        damaged = error.damaged
        if damaged is None:
            raise InitError(f"--init {text}: {error}") from None
        earlier = previous_checkpoint(damaged.checkpoint)
        raise InitError(f"--init {text}: {damaged.problem}" + (
            f"; start from the previous one with --init {run_dir}:{earlier.name}"
            if earlier else "")) from None
    tokenizer = run_dir / TOKENIZER
    return InitSource(run, text, weights_sha256(run.checkpoint),
                      tokenizer.read_text() if tokenizer.is_file() else None)


def checked_source(init: str, seq_len: int, dataset: Dataset, data: str | None) -> InitSource:
    """The run `init` names, loaded and checked against the context asked for and the
    dataset's tokenizer (`data` as given: None for the built-in corpus)."""
    source = load_source(init)
    check_context(seq_len, source)
    check_dataset_tokenizer(dataset.tokenizer_json, dataset.special.vocab_size, data, source)
    return source


def check_context(seq_len: int, source: InitSource) -> None:
    """A context longer than the source's is refused: learned positions have no row past it,
    and rotary ones were never trained past it (lmlab does not rescale them)."""
    context = source.model_cfg.max_seq_len
    if seq_len > context:
        kind = ("learned positions stop at" if source.model_cfg.positions == "learned"
                else "rotary positions were trained up to")
        raise InitError(f"--seq-len {seq_len} is longer than {source.given}'s context: its "
                        f"{kind} {context} tokens; give --seq-len {context} or less")


def canonical_tokenizer(tokenizer_json: str) -> str:
    """A tokenizer.json as the tokenizers library writes it, without padding or truncation
    (which say how to batch, not how to tokenise)."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer.to_str()


def check_dataset_tokenizer(dataset_tokenizer: str | None, vocab_size: int, data: str | None,
                            source: InitSource) -> None:
    """The dataset must be tokenised as the source was: same tokenizer (a dataset in memory,
    without one: the same vocabulary size)."""
    model_vocab = source.model_cfg.vocab_size
    if dataset_tokenizer is None or source.tokenizer_json is None:
        same = vocab_size == model_vocab
    else:
        same = canonical_tokenizer(dataset_tokenizer) == canonical_tokenizer(
            source.tokenizer_json)
    if not same:
        data_name = "the built-in corpus" if data is None else f"--data {data}"
        raise InitError(f"{data_name} was tokenised with another tokenizer than "
                        f"{source.given}'s; prepare the text with the source's: lmlab prepare "
                        f"TEXT --tokenizer {split_init(source.given)[0]} --out DIR")


def warm_started_model(source: InitSource, heads: Iterable[str] | Mapping[str, Head]
                       ) -> LanguageModel:
    """A model of the source's shape with `heads` (built for it): the backbone and the heads
    the source has carry its weights; the others start as the module's docstring says."""
    model = LanguageModel(source.model_cfg, heads=heads)  # every weight initialised
    trained = source.run.model
    for name, head in model.heads.items():
        if name in trained.heads:
            head.load_state_dict(trained.heads[name].state_dict())
    # The backbone after the heads: where a generator shares its table, the model's own wins
    # (a GDES source's generator keeps a table of its own, lmlab.model.sharing).
    model.backbone.load_state_dict(trained.backbone.state_dict())
    for name, head in model.heads.items():
        if name not in trained.heads:
            head.start_from(trained.heads, model.backbone.token_embedding)
    return model


def how_heads_start(source: InitSource, heads: tuple[str, ...]) -> str:
    """One line for the run's start: what comes from the source, what is new and how."""
    kept = [name for name in heads if name in source.run.model.heads]
    created = [f"{name} ({HEADS[name].how_it_starts(source.model_cfg)})" for name in heads
               if name not in source.run.model.heads]
    return (f"starting from {source.given} ({source.checkpoint}): its backbone"
            + "".join(f", its {name} head" for name in kept)
            + (f"; new: {', '.join(created)}" if created else ""))




# New weights learn at from-scratch pre-training's rate, whatever a continued body's is: a new
# head, alone in its warm-up, at 1e-4 took 20 steps to get all-MiniLM-L6-v2's masked-LM loss
# from 11.0 to only 8.6 nats, still above the 7.0 of token frequencies alone.
NEW_WEIGHTS_LR = LoopConfig.lr
# The share of a continued run whose steps train only the heads its source lacks (auto);
# docs/continued-pretraining.md gives the measurements behind it.
HEAD_WARMUP_SHARE = 0.1


def check_head_warmup(steps: int | None, init: str | None, objective: str, distributed: bool,
                      new_heads: tuple[str, ...]) -> None:
    """Refuse, before anything is written, a head warm-up of `steps` that cannot be done."""
    if not steps:
        return
    if not new_heads:
        raise InitError(f"--head-warmup-steps: {init} already has every head {objective} "
                        "trains, so there is no new head to warm up; leave it out")
    if distributed:
        raise InitError("--head-warmup-steps freezes the body for a while, which DDP and "
                        "FSDP2 cannot do mid-run; give --head-warmup-steps 0 under torchrun")


def head_warmup_steps(steps: int | None, distributed: bool, new_heads: tuple[str, ...],
                      planned_steps: int) -> int:
    """Steps the new heads train alone: `steps` as given, else HEAD_WARMUP_SHARE of the run
    (none when no head is new, or under torchrun: its wrappers cannot freeze the body
    mid-run)."""
    if not new_heads or distributed or planned_steps == 0:  # no steps: the source as it came
        return 0
    if steps is not None:
        return steps
    return max(1, round(HEAD_WARMUP_SHARE * planned_steps))


def heads_it_lacks(heads: tuple[str, ...], source: InitSource | None) -> tuple[str, ...]:
    """The `heads` an objective trains that the --init source lacks (none without one)."""
    return () if source is None else tuple(
        name for name in heads if name not in source.run.model.heads)


def say_how_it_starts(source: InitSource | None, heads: tuple[str, ...], head_steps: int,
                      total_steps: int) -> None:
    """With --init: the source and its heads; the head warm-up, and a budget it leaves the
    body nothing of."""
    if source is None:
        return
    print(how_heads_start(source, heads))
    if head_steps:
        print(f"the new heads train alone for the first {head_steps} of {total_steps} steps, "
              "the rest of the model frozen, so their first large gradients do not reach it")
    if head_steps and head_steps >= total_steps:
        print(f"warning: the budget ({total_steps} steps) ends within the head warm-up "
              f"({head_steps} steps), so the body never trains; give a larger budget, or "
              "--head-warmup-steps 0 to train everything from the start")
