"""Data: text sources → prepared dataset directories → token blocks for training.

    lmlab.data.prepare(["corpus.jsonl:0.7", "code/:0.3"], "data/mine", tokenizer="wordpiece")
    dataset = lmlab.data.open("data/mine")     # memory-mapped token streams, special tokens
"""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "Dataset": "lmlab.data.dataset", "open": "lmlab.data.dataset:open_dataset",
    "prepare": "lmlab.data.prepare", "prepare_documents": "lmlab.data.prepare",
    "Recipe": "lmlab.data.recipe",
})

__all__ = ["Dataset", "Recipe", "open", "prepare", "prepare_documents"]
