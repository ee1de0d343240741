"""`lmlab export RUN --out DIR`: a run as a Hugging Face model directory.

    DIR/config.json             architecture, sizes, special-token ids, labels
    DIR/model.safetensors       HF-named weights, tied tensors stored once
    DIR/generation_config.json  causal models
    DIR/tokenizer.json, tokenizer_config.json, special_tokens_map.json
    DIR/lmlab-export.json       where it came from, and the parity check's result

The directory is staged beside DIR and renamed into place, so a failed export leaves no
half-written model behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import save_file

from lmlab.atomic import atomic_directory, check_replaceable
from lmlab.export.hf import HF_FAMILIES, hf_config_dict, to_hf_state_dict
from lmlab.export.hf_files import EXPORT_RECORD
from lmlab.export.targets import ExportError, Target, export_target
from lmlab.export.tokenizer_files import write_tokenizer_files
from lmlab.runs import Run

# The parity check's bound: fp32 on CPU agrees to about 1e-6; more means a wrong mapping.
CHECK_TOLERANCE = 1e-4


@dataclass
class Exported:
    out: Path
    target: Target
    max_difference: float | None  # None: not checked (--no-check, or no transformers)


def _special_ids(run: Run) -> dict:
    special = run.special
    return {"pad_token_id": special.pad, "bos_token_id": special.bos,
            "eos_token_id": special.eos}


def _model_config(run: Run, target: Target) -> dict:
    config = hf_config_dict(run.model.cfg, target.family, **_special_ids(run), **target.config)
    return {**config, "architectures": [target.architecture], "torch_dtype": "float32"}


def _weights(run: Run, target: Target) -> dict:
    """HF-named tensors, each tie stored once (HF restores the alias when loading)."""
    weights = target.weights or (lambda model: to_hf_state_dict(model, target.family))
    state = weights(run.model.float())
    if run.model.cfg.tie_embeddings:
        for alias in HF_FAMILIES[target.family].tied:
            state.pop(alias, None)
    if not target.heads:  # the bare backbone: its keys have no prefix
        state = {key.partition(".")[2]: tensor for key, tensor in state.items()}
    return {key: tensor.detach().contiguous().cpu() for key, tensor in state.items()}


def _generation_config(run: Run) -> dict:
    return {**{key: value for key, value in _special_ids(run).items() if value is not None},
            "do_sample": False}


def export_run(run: Run, out: str | Path, check: bool = True) -> Exported:
    """Write `run` (loaded with lmlab.runs.load_run) to `out` as a Hugging Face directory;
    with `check`, load it back with transformers (when installed) and compare outputs."""
    out = Path(out)
    target = export_target(run)
    check_replaceable(out, (out / EXPORT_RECORD).is_file(), "an lmlab export")
    tokenizer = run.require_tokenizer()
    difference = None
    with atomic_directory(out) as staging:
        files = {"config.json": _model_config(run, target)}
        if target.causal:
            files["generation_config.json"] = _generation_config(run)
        for name, content in files.items():
            (staging / name).write_text(json.dumps(content, indent=2) + "\n")
        save_file(_weights(run, target), str(staging / "model.safetensors"),
                  metadata={"format": "pt"})
        write_tokenizer_files(staging, tokenizer, run.config.special_token_names, run.special,
                              run.max_seq_len, token_types=bool(run.model.cfg.type_vocab_size),
                              pair_framed=run.task is not None
                              or run.objective.framing == "pair", encoder=not target.causal)
        if check and _transformers_installed():
            from lmlab.export.check import max_difference

            difference = max_difference(run, target, staging)
            if not difference <= CHECK_TOLERANCE:  # NaN fails too
                raise ExportError(f"the exported model's outputs differ from the run's by "
                                  f"{difference:.2e} (more than {CHECK_TOLERANCE:g}); nothing "
                                  "was written")
        record = {"run": str(run.path), "checkpoint": str(run.checkpoint), "objective": run.spec,
                  "architecture": target.architecture, "max_difference": difference}
        (staging / EXPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return Exported(out, target, difference)


def _transformers_installed() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True
