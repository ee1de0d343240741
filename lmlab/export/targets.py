"""Which Hugging Face class a run exports to, or why none reproduces it exactly.

The family (bert, gpt2, modern, modernbert) fixes the HF architecture; the heads of a
pre-trained run, or the traits of a fine-tuned run's task, fix the class; the way the model
reads (its objective's attention, a fine-tuned run's attention and pooling) must be the one
that class computes with, or the exported model would give other answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lmlab.data.special_tokens import SpecialTokens
from lmlab.export.electra import RTD_HEADS, electra_config, electra_weights
from lmlab.export.hf import family_of, to_hf_state_dict
from lmlab.model.heads import pools
from lmlab.runs import Run
from lmlab.runs.schema import RunTask
from lmlab.tasks.framing import padding_apart
from lmlab.tasks.traits import TASKS


class ExportError(ValueError):
    """A run that no Hugging Face class reproduces, stated in one line with what would work."""


@dataclass(frozen=True)
class Target:
    family: str  # lmlab family whose weight table applies (lmlab.export.hf.HF_FAMILIES)
    architecture: str  # the transformers class, e.g. "BertForMaskedLM"
    heads: tuple[str, ...]  # the lmlab heads it carries, sorted; none for a bare backbone
    config: dict = field(default_factory=dict)  # what the class adds to config.json
    # model → HF-named weights, where the family's table alone does not give them (ELECTRA)
    weights: Callable | None = None
    # what the format writes beside the model (sentence-transformers: pooling, normalize)
    settings: dict = field(default_factory=dict)
    note: str | None = None  # what the export leaves out of the run, said in one line
    # the padding id the export declares in place of the tokenizer's (lmlab.tasks.framing.
    # padding_apart): a decoder's sequence class finds each row's last token by it
    padding: int | None = None

    @property
    def causal(self) -> bool:
        return self.family not in ENCODERS

    def pad_id(self, special: SpecialTokens) -> int | None:
        """The id the exported model's config and tokenizer pad with."""
        return special.pad if self.padding is None else self.padding


@dataclass(frozen=True)
class Format:
    """One export format (lmlab.export.formats): the class a run becomes, refusing before
    anything is written; the writer into a staging folder, returning the check's largest
    difference (None: not checked); that difference's bound; the options it takes. A format
    whose output is one `file` (GGUF) may be written as that file itself, replacing a file
    there only when `ours` says lmlab wrote it."""

    target: Callable[..., Target]
    write: Callable[[Run, Target, Path, bool], float | None]
    tolerance: float
    options: tuple[str, ...] = ()
    file: str | None = None
    ours: Callable[[Path], bool] = lambda path: False


# The families whose Hugging Face classes read bidirectionally; the others read causally.
ENCODERS = ("bert", "modernbert")

# A pre-trained run's (family, heads) → class; heads are sorted so the key ignores their order.
# A fine-tuned run's class is its task's (lmlab.tasks.traits).
CLASSES: dict[tuple[str, tuple[str, ...]], str] = {
    ("bert", ()): "BertModel",
    ("bert", ("mlm",)): "BertForMaskedLM",
    ("bert", ("mlm", "nsp")): "BertForPreTraining",
    ("gpt2", ()): "GPT2Model",
    ("gpt2", ("lm",)): "GPT2LMHeadModel",
    ("modern", ()): "LlamaModel",
    ("modern", ("lm",)): "LlamaForCausalLM",
    ("modernbert", ()): "ModernBertModel",
    ("modernbert", ("mlm",)): "ModernBertForMaskedLM",
}

# Pre-training heads a family's classes have no place for, left out of the export with a note:
# ModernBERT was pre-trained without next-sentence prediction, so it has no class for it.
LEFT_OUT = {"modernbert": ("nsp",)}


def export_target(run: Run) -> Target:
    """The HF class reproducing `run` exactly; ExportError saying why and what would work."""
    try:
        family = family_of(run.model.cfg)
    except ValueError as error:
        raise ExportError(f"{error}; export needs a run built from a bert, gpt2, modern "
                          "or modernbert preset") from None
    if family == "bert" and not run.model.cfg.tie_embeddings:
        raise ExportError("the run's MLM decoder is not tied to its embeddings; HF's BERT "
                          "classes always tie them (pre-train with tied embeddings to export)")
    _check_reading(run, family)
    heads = tuple(sorted(run.model.heads))
    if run.task is not None:
        architecture = TASKS[run.task.name].hf_classes[family]
        return Target(family, architecture, heads, _task_config(run.task, family),
                      _task_weights(family, architecture),
                      padding=_last_token_padding(run, family))
    if family == "bert" and heads == RTD_HEADS:  # the discriminator, as ELECTRA releases it
        return Target(family, "ElectraForPreTraining", ("rtd",), electra_config(run.model),
                      electra_weights)
    kept = tuple(head for head in heads if head not in LEFT_OUT.get(family, ()))
    if (family, kept) not in CLASSES:
        raise ExportError(_no_class(family, heads))
    dropped = " + ".join(head for head in heads if head not in kept)
    note = dropped and (f"left out the {dropped} head, which {CLASSES[family, kept]} has no "
                        "place for; the rest of the run is exported whole")
    return Target(family, CLASSES[family, kept], kept, note=note or None)


def _task_weights(family: str, architecture: str) -> Callable | None:
    """LlamaForQuestionAnswering keeps its backbone under `transformer.`, not `model.`."""
    if architecture != "LlamaForQuestionAnswering":
        return None
    return lambda model: {(f"transformer.{key[6:]}" if key.startswith("model.") else key): value
                          for key, value in to_hf_state_dict(model, family).items()}


def _no_class(family: str, heads: tuple[str, ...]) -> str:
    offered = sorted(" + ".join(h) or "no head" for fam, h in CLASSES if fam == family)
    return (f"Hugging Face has no {family} class with the heads {' + '.join(heads)}; "
            f"the {family} family exports runs with {', '.join(offered)}")


def _check_reading(run: Run, family: str) -> None:
    """HF's encoder classes (BERT, ModernBERT) read bidirectionally; GPT-2 and Llama causally.
    BERT's and ModernBERT's sequence classes pool [CLS] (ModernBERT also the mean)."""
    if run.task is not None:  # fine-tuned: its own reading
        _check_task_reading(run, family)
        return
    leaves = run.objective.leaves()
    if family in ENCODERS:
        wrong = [leaf.name for leaf in leaves if leaf.traits.attention != "bidirectional"
                 or (leaf.traits.fill_mask or ("", 0))[1] != 0]
        if wrong:
            raise ExportError(f"the run was pre-trained with {run.spec}, which {family}'s "
                              "classes do not compute (they read bidirectionally and predict "
                              "each [MASK] at its own position); pre-train with mlm")
    elif not run.objective.reads_causally:
        encoder = ("; a masked model exports from the modernbert family (--model auto or "
                   "modernbert-mini)" if family == "modern" else "")
        raise ExportError(f"the run was pre-trained with {run.spec}, which reads part of its "
                          f"input bidirectionally; Hugging Face's {family} classes read "
                          f"left to right only (pre-train with clm to export){encoder}")


# The poolings each encoder family's sequence classes compute (lmlab's mean is over every
# token the row holds, as ModernBERT's classifier_pooling "mean" is).
POOLINGS = {"bert": ("cls",), "modernbert": ("cls", "mean")}


def _check_task_reading(run: Run, family: str) -> None:
    reading = run.task.reading
    expected = "bidirectional" if family in ENCODERS else "causal"
    if reading.attention != expected:
        raise ExportError(f"the run was fine-tuned with {reading.attention} attention; "
                          f"{family}'s task classes read with {expected} attention (fine-tune "
                          f"with --attention {expected} to export)")
    allowed = POOLINGS.get(family, ("last",))
    if pools(run.task.head) and reading.pooling not in allowed:
        raise ExportError(f"the run pools its {reading.pooling} tokens; {family}'s sequence "
                          f"classes pool {' or '.join(allowed)} (fine-tune with --pooling "
                          f"{allowed[0]} to export)")


def _last_token_padding(run: Run, family: str) -> int | None:
    """The padding id by which GPT-2's and Llama's sequence classes find the token the run
    pools (None: not such a class). They score a row's last token by one bias-free linear
    layer, taking that token to be the last one that is not padding (config.pad_token_id)."""
    if "classify" not in run.model.heads or family in ENCODERS:
        return None
    if run.task.head_options.get("pooler", True):  # as runs were saved before the option
        raise ExportError(f"the run's sequence head pools through BERT's dense + tanh pooler, "
                          f"which Hugging Face's {family} sequence classes (one bias-free "
                          "linear layer on the last token) do not have; fine-tune it again "
                          "with --pooling last, which trains that layer, to export")
    try:
        return padding_apart(run.special)
    except ValueError as reason:
        raise ExportError(f"{reason}: Hugging Face's {family} sequence classes take a row's "
                          "last token to be its last one that is not padding "
                          "(config.pad_token_id), so they would not read the token lmlab "
                          "pools; lmlab predict reads this run, and a run fine-tuned from one "
                          "whose tokenizer has a padding token (lmlab's own have [PAD]) "
                          "exports") from None


def _task_config(task: RunTask, family: str) -> dict:
    """config.json fields of a fine-tuned head: its labels (else the outputs of a head without
    label names), and the loss HF should train it with."""
    problem = TASKS[task.name].hf_problem_type
    extra = {} if problem is None else {"problem_type": problem}
    if family == "modernbert":
        extra["classifier_pooling"] = task.reading.pooling
    if task.labels:
        extra["id2label"] = dict(enumerate(task.labels))
        extra["label2id"] = {label: index for index, label in enumerate(task.labels)}
    elif "num_labels" in task.head_options:
        extra["num_labels"] = task.head_options["num_labels"]
    return extra
