"""The model, readable in one sitting: the backbone (transformer.py), attention, masks,
layers, and the heads a run trains."""

from lmlab.model.attention import KVCache
from lmlab.model.masks import MaskSpec
from lmlab.model.model import LanguageModel
from lmlab.model.transformer import Transformer

__all__ = ["KVCache", "LanguageModel", "MaskSpec", "Transformer"]
