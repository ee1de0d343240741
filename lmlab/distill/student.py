"""The student: layers cut from the teacher's own weights, or a fresh model of a preset."""

from __future__ import annotations

from collections.abc import Callable

from lmlab.config import ModelConfig
from lmlab.config.presets import preset
from lmlab.distill.prune import prune_width
from lmlab.model import LanguageModel
from lmlab.model.heads import Head

HeadsFor = Callable[[ModelConfig], dict[str, Head]]  # a model's shape → its task head


def kept_layers(total: int, keep: int) -> list[int]:
    """`keep` of `total` layers, evenly spaced, the first and the last among them (one: the
    last): e.g. 6 → 2 keeps [0, 5], 6 → 3 keeps [0, 2, 5] (round half to even)."""
    if not 1 <= keep <= total:
        raise ValueError(f"--layers {keep}: the teacher has {total} layers; keep 1 to {total}")
    if keep == 1:
        return [total - 1]
    return [round(i * (total - 1) / (keep - 1)) for i in range(keep)]


def cut_from(teacher: LanguageModel, keep: int, heads: HeadsFor) -> LanguageModel:
    """A student of the teacher's shape with `keep` of its layers (`kept_layers`): the
    embeddings, those blocks, the final norm and the heads it has carry the teacher's weights
    exactly."""
    if teacher.cfg.unet_skips or teacher.cfg.value_embeddings:  # both pair layers by depth
        raise ValueError("--layers cuts models without U-net skips or value embeddings "
                         "only; distill into a --student preset instead")
    layers = kept_layers(teacher.cfg.n_layers, keep)
    cfg = teacher.cfg.with_changes(n_layers=keep)
    student = LanguageModel(cfg, heads=heads(cfg))
    wanted = student.state_dict()
    renamed = {f"backbone.blocks.{layer}.": f"backbone.blocks.{index}."
               for index, layer in enumerate(layers)}
    state = {}
    for key, tensor in teacher.state_dict().items():
        if key.startswith("backbone.blocks."):
            prefix = ".".join(key.split(".")[:3]) + "."
            if prefix not in renamed:
                continue
            key = renamed[prefix] + key[len(prefix):]
        if key in wanted:  # the teacher's other heads stay behind
            state[key] = tensor
    student.load_state_dict(state, strict=True)
    return student


def student_model(teacher: LanguageModel, cfg, heads: HeadsFor) -> LanguageModel:
    """`cfg.layers` cut from the teacher, narrowed to `cfg.width` when given, or a fresh
    `cfg.student` preset, with `heads`."""
    if cfg.layers is None:
        return from_preset(teacher, cfg.student, heads)
    student = cut_from(teacher, cfg.layers, heads)
    return student if cfg.width is None else prune_width(student, cfg.width, heads)


def from_preset(teacher: LanguageModel, name: str, heads: HeadsFor) -> LanguageModel:
    """A fresh student of preset `name` reading the teacher's vocabulary and context."""
    cfg = preset(name, teacher.cfg.vocab_size, teacher.cfg.max_seq_len)
    return LanguageModel(cfg, heads=heads(cfg))
