from lmlab.model.attention import KVCache
from lmlab.model.masks import MaskSpec
from lmlab.model.model import LanguageModel
from lmlab.model.transformer import Transformer

__all__ = ["KVCache", "LanguageModel", "MaskSpec", "Transformer"]
