"""How a sentence-transformers model turns its hidden states into one vector, read at import
so that the run embeds as the model's makers defined it.

    modules.json                Transformer → Pooling (→ Normalize)
    1_Pooling/config.json       the pooling mode (`pooling_mode`, or the older booleans)
    sentence_bert_config.json   max_seq_length: longer texts are cut to it

The run's config.json records this as its `embedding` entry (lmlab.runs.schema.Embedding).
sentence-transformers pools over every token the model read, [CLS] and [SEP] included;
lmlab's `mean-all` pooling is that mean, and its `cls` the first position. Other modes (max,
mean_sqrt_len_tokens, weightedmean, lasttoken, several at once) and other modules (Dense, ...)
are not what `lmlab embed` computes: the import then notes why, and the run embeds with
lmlab's defaults.
"""

from __future__ import annotations

from pathlib import Path

from lmlab.export.hf_files import HFImportError, read_json, read_json_object
from lmlab.runs.schema import Embedding

MODULES = "modules.json"
SETTINGS = "sentence_bert_config.json"
# sentence-transformers' pooling mode → lmlab's pooling computing the same vector.
ST_POOLINGS = {"cls": "cls", "mean": "mean-all"}
# The older 1_Pooling/config.json booleans, in the order sentence-transformers concatenates.
LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean",
                "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean",
                "pooling_mode_lasttoken": "lasttoken"}


class _NotComputed(Exception):
    """A well-formed configuration that lmlab's embed does not compute; says what it asks."""


def read_embedding(directory: Path, context: int) -> tuple[Embedding | None, str | None]:
    """(the run's `embedding` entry, or None; a note saying why the directory's own pooling
    was not recorded, or None). No modules.json: (None, None). `context` is the model's."""
    path = directory / MODULES
    if not path.is_file():
        return None, None
    modules = _modules(path)
    try:
        return _entry(directory, modules, context), None
    except _NotComputed as why:
        return None, (f"{path}: {why}, which lmlab embed does not compute; the run embeds "
                      "with lmlab's defaults (--pooling mean-all)")


def _modules(path: Path) -> list[tuple[str, str]]:
    """(kind, folder) of each module, in order: kind is the class name ("Pooling")."""
    found = read_json(path)
    if not isinstance(found, list) or not all(
            isinstance(m, dict) and isinstance(m.get("type"), str)
            and isinstance(m.get("path", ""), str) for m in found):
        raise HFImportError(f"{path}: expected a list of modules, each with a \"type\" and "
                            "a \"path\"")
    return [(m["type"].rsplit(".", 1)[-1], m.get("path", "")) for m in found]


def _entry(directory: Path, modules: list[tuple[str, str]], context: int) -> Embedding:
    kinds = [kind for kind, _ in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        raise _NotComputed(f"its modules are {' → '.join(kinds) or 'none'}, not Transformer → "
                           "Pooling (→ Normalize)")
    mode = pooling_mode(read_json_object(_inside(directory, modules[1][1]) / "config.json"))
    if mode not in ST_POOLINGS:
        raise _NotComputed(f"it pools with {mode}")
    settings = directory / SETTINGS
    max_len = read_json_object(settings).get("max_seq_length") if settings.is_file() else None
    if not (isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0):
        max_len = None
    elif max_len > context:
        max_len = context  # no text is read past the model's context
    return Embedding(ST_POOLINGS[mode], kinds[-1] == "Normalize", max_len)


def pooling_mode(config: dict) -> str:
    """The one mode a Pooling config names; several concatenated are not computed."""
    modes = (config.get("pooling_mode")
             or [mode for key, mode in LEGACY_MODES.items() if config.get(key)]
             or "mean")  # sentence-transformers' default
    modes = modes if isinstance(modes, list) else [modes]
    if len(modes) != 1:
        raise _NotComputed(f"it concatenates {' + '.join(map(str, modes))} pooling")
    return str(modes[0])


def _inside(directory: Path, folder: str) -> Path:
    """A module's folder, which must lie inside the model directory."""
    if Path(folder).is_absolute() or ".." in Path(folder).parts:
        raise HFImportError(f"{directory / MODULES}: module folder {folder!r} is not inside "
                            "the model directory")
    return directory / folder
