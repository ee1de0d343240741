"""Data: text sources → prepared dataset directories → token blocks for training.

    lmlab.data.prepare(["corpus.jsonl:0.7", "code/:0.3"], "data/mine", tokenizer="wordpiece")
    dataset = lmlab.data.open("data/mine")     # memory-mapped token streams, special tokens
"""

from lmlab.data.dataset import Dataset
from lmlab.data.dataset import open_dataset as open  # shadows the builtin only in here
from lmlab.data.prepare import prepare, prepare_documents
from lmlab.data.recipe import Recipe

__all__ = ["Dataset", "Recipe", "open", "prepare", "prepare_documents"]
