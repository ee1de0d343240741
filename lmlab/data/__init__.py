"""Data: text sources → prepared dataset directories → token blocks for training.

    lmlab.data.prepare(["corpus.jsonl:0.7", "code/:0.3"], "data/mine", tokenizer="wordpiece")
    dataset = lmlab.data.open_dataset("data/mine")  # memory-mapped token streams, special tokens
"""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "Dataset": "lmlab.data.dataset", "open_dataset": "lmlab.data.dataset",
    "prepare": "lmlab.data.preparation", "prepare_documents": "lmlab.data.preparation",
    "Recipe": "lmlab.data.recipe",
})

__all__ = ["Dataset", "Recipe", "open_dataset", "prepare", "prepare_documents"]
