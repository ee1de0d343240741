"""Using a trained run: load it, then fill masks, generate, embed and score."""

from lmlab.infer.pretrained import Pretrained, RunLoadError, load

__all__ = ["Pretrained", "RunLoadError", "load"]
