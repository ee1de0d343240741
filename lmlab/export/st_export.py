"""The sentence-transformers format: the run's backbone as a Hugging Face directory, with the
modules that pool and normalise as `lmlab embed` does, so that `SentenceTransformer(DIR)
.encode(texts)` gives the run's embeddings.

    DIR/...                      the bare backbone (BertModel, ModernBertModel, LlamaModel...)
    DIR/modules.json             Transformer → Pooling (→ Normalize)
    DIR/1_Pooling/config.json    the pooling mode
    DIR/2_Normalize/             when the run's embeddings are normalised
    DIR/sentence_bert_config.json  max_seq_length

The tokenizer frames a text as lmlab reads it (`A [EOS]`, or `[CLS] A [SEP]` for a model
that read pairs). sentence-transformers pools every token the model read, so lmlab's `mean`
(the text's own tokens) has no counterpart where the framing adds tokens; `mean-all` and
`cls` do. Import reads these files back (lmlab.export.st_pooling).
"""

from __future__ import annotations

import json
from pathlib import Path

from lmlab.export.hf import family_of
from lmlab.export.hf_directory import write_hf_directory
from lmlab.export.hf_format import transformers_installed
from lmlab.export.st_pooling import MODULES, SETTINGS
from lmlab.export.targets import CLASSES, ExportError, Format, Target
from lmlab.infer.embed import embed, embedding_reading
from lmlab.runs import Run
from lmlab.runs.reading import reading_document
from lmlab.runs.schema import Embedding

# lmlab's pooling → sentence-transformers' mode computing the same vector.
ST_MODES = {"cls": "cls", "mean-all": "mean"}
CHECK_TEXTS = ["The quick brown fox jumps over the lazy dog.",
               "Paris is the capital of France.", "A short one."]


def target(run: Run, pooling: str | None = None, normalize: bool | None = None) -> Target:
    """The bare backbone's class, with the pooling and normalisation `lmlab embed` uses."""
    pooling, normalize = embedding_reading(run, pooling, normalize)
    if pooling == "mean" and not reading_document(run, [])[0]:
        pooling = "mean-all"  # nothing framed: the text's tokens are every token read
    if pooling not in ST_MODES:
        raise ExportError("sentence-transformers pools every token the model read, the "
                          "framing's [EOS]/[CLS]/[SEP] included, while the run embeds with "
                          "mean pooling over the text alone; export with --pooling mean-all "
                          "(what lmlab embed --pooling mean-all computes) or --pooling cls")
    try:
        family = family_of(run.model.cfg)
    except ValueError as error:
        raise ExportError(f"{error}; export needs a run built from a bert, gpt2, modern or "
                          "modernbert preset") from None
    causal = run.objective.reads_causally
    if causal != (family in ("gpt2", "modern")):
        raise ExportError(f"the run embeds reading {'causally' if causal else 'both ways'}, "
                          f"which Hugging Face's {family} classes do not")
    if pooling == "cls" and causal:
        raise ExportError("cls pooling reads the first position, which a causal model "
                          "computes from the first token alone; export with --pooling mean-all")
    return Target(family, CLASSES[family, ()], (),
                  settings={"pooling": pooling, "normalize": normalize})


def write(run: Run, target: Target, staging: Path, check: bool) -> float | None:
    write_hf_directory(run, target, staging, framed=True,
                       pair_framed=run.objective.framing == "pair")
    pooling, normalize = target.settings["pooling"], target.settings["normalize"]
    modules = ["Transformer", "Pooling"] + (["Normalize"] if normalize else [])
    folders = ["", "1_Pooling", "2_Normalize"]
    (staging / MODULES).write_text(json.dumps(
        [{"idx": index, "name": str(index), "path": folders[index],
          "type": f"sentence_transformers.models.{kind}"}
         for index, kind in enumerate(modules)], indent=2) + "\n")
    (staging / "1_Pooling").mkdir()
    (staging / "1_Pooling" / "config.json").write_text(json.dumps(
        _pooling_config(run.model.cfg.d_model, ST_MODES[pooling]), indent=2) + "\n")
    if normalize:
        (staging / "2_Normalize").mkdir()
    max_len = (run.config.embedding or Embedding()).max_len or run.max_seq_len
    (staging / SETTINGS).write_text(json.dumps(
        {"max_seq_length": max_len, "do_lower_case": False}, indent=2) + "\n")
    if not (check and transformers_installed()):
        return None
    return _max_difference(run, staging, pooling, normalize)


def _pooling_config(width: int, mode: str) -> dict:
    """1_Pooling/config.json in the form every sentence-transformers version reads."""
    return {"word_embedding_dimension": width,
            **{key: key == f"pooling_mode_{'cls_token' if mode == 'cls' else 'mean_tokens'}"
               for key in ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                           "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")}}


def _max_difference(run: Run, staging: Path, pooling: str, normalize: bool) -> float | None:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model = SentenceTransformer(str(staging), device="cpu")
    theirs = model.encode(CHECK_TEXTS, convert_to_numpy=True)
    ours = embed(run, CHECK_TEXTS, pooling, normalize)
    return float(abs(theirs - ours).max())


SENTENCE_TRANSFORMERS = Format(target, write, tolerance=1e-5, options=("pooling", "normalize"))
