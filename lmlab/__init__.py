"""lmlab: pre-train, compare and use transformer language models with every classic
self-supervised objective on one backbone.

The pipeline's verbs: `prepare` (text → dataset), `pretrain` (dataset → run), `load` (run →
model with fill-mask, generate, embed and score) and `evaluate` (run → perplexities and
minimal-pair accuracy), `fine_tune` (run + labelled task → fine-tuned run) and `predict`;
`plan` (budget → model size) and `compare_objectives` (objectives → verdicts on each
measure).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lmlab.lazy import lazy_attributes
from lmlab.version import __version__

__getattr__ = lazy_attributes(__name__, {
    "ModelConfig": "lmlab.config.model", "prepare": "lmlab.data.preparation.entry",
    "evaluate": "lmlab.eval.evaluate", "fine_tune": "lmlab.finetune:finetune",
    "compare_objectives": "lmlab.compare:compare", "KVCache": "lmlab.model",
    "LanguageModel": "lmlab.model", "MaskSpec": "lmlab.model",
    "preset": "lmlab.config.presets", "preset_names": "lmlab.config.presets",
    "Pretrained": "lmlab.pretrained", "load": "lmlab.pretrained", "Run": "lmlab.runs",
    **dict.fromkeys(("Alternating", "Batch", "CausalLM", "LinearRate", "LossSum", "MaskedLM",
                     "MaskedLMWithNSP", "Mixture", "PrefixLM", "SpanCorruption",
                     "SpecialTokens", "Then"), "lmlab.objectives"),
})

if TYPE_CHECKING:
    from lmlab.runs import Run


def pretrain(config: str | Path | None = None, **fields) -> Path:
    """Pre-train as `lmlab pretrain` does, from a YAML/TOML config file and/or its fields by
    name, e.g. `lmlab.pretrain(objective="clm", data="data/mine", steps=200)`; with no
    `data`, on the built-in corpus. Returns the run directory."""
    from lmlab.train.entry import pretrain_with_settings  # imports the distributed engine

    return pretrain_with_settings(Path(config) if config is not None else None, fields)


def predict(run: str | Path | Run, texts=None, file: str | Path | None = None,
            all_scores: bool = False) -> list[dict]:
    """Predictions of a fine-tuned run for `texts` or the examples of `file`, shaped as the
    Hugging Face pipelines shape them."""
    from lmlab.infer.predict import predict as predict_with

    return predict_with(run, texts, file, all_scores)


def plan(objective: str = "mlm", **options):
    """The sizing table `lmlab plan` prints: for each candidate size, measured throughput,
    FLOPs per token, tokens reachable in the budget (`minutes=`, `flops=` or `tokens=`), the
    loss a Chinchilla-style fit predicts, and a recommended `lmlab pretrain` command."""
    from lmlab.planning.sizing import plan as plan_sizes  # times training steps

    return plan_sizes(objective, **options)


def export_hf(run: str | Path | Run, out: str | Path, checkpoint: str = "best",
              check: bool = True) -> Path:
    """Write a run as a Hugging Face model directory, as `lmlab export` does; returns it."""
    from lmlab.export.writer import export_run
    from lmlab.runs.run import Run, load_run

    loaded = run if isinstance(run, Run) else load_run(run, checkpoint)
    return export_run(loaded, out, check).out


def import_hf(source: str | Path, out: str | Path, allow_pickle: bool = False) -> Path:
    """Turn a Hugging Face model directory or GGUF file into the lmlab run `out`, as
    `lmlab import` does; returns it."""
    from lmlab.export.importer import import_hf as import_from

    return import_from(source, out, allow_pickle).out


__all__ = [
    "Alternating", "Batch", "CausalLM", "KVCache", "LanguageModel", "LinearRate", "LossSum",
    "MaskSpec", "MaskedLM", "MaskedLMWithNSP", "Mixture", "ModelConfig", "PrefixLM",
    "Pretrained", "Run", "SpanCorruption", "SpecialTokens", "Then", "compare_objectives",
    "evaluate", "load", "prepare",
    "__version__", "export_hf", "fine_tune", "import_hf", "plan", "predict", "preset",
    "preset_names", "pretrain",
]
