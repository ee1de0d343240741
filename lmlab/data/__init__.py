"""Data: text sources → prepared dataset directories → token blocks for training.

Three parts, in the pipeline's order: text/ reads the user's files (for every consumer);
preparation/ turns text into a dataset directory (cleaning, near-dedup, mixing, the recipe,
tokenizer training, encoding, the engines); the modules here are the directory as training
reads it (dataset.py, shards.py, loader.py and packing.py) and the vocabulary every side
shares (special_tokens.py, tokenizer.py), none of which imports preparation/.

    lmlab.data.prepare(["corpus.jsonl:0.7", "code/:0.3"], "data/mine", tokenizer="wordpiece")
    dataset = lmlab.data.open_dataset("data/mine")  # memory-mapped token streams, special tokens
"""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "Dataset": "lmlab.data.dataset", "open_dataset": "lmlab.data.dataset",
    "prepare": "lmlab.data.preparation.entry", "prepare_documents": "lmlab.data.preparation.entry",
    "Recipe": "lmlab.data.preparation.recipe",
})

__all__ = ["Dataset", "Recipe", "open_dataset", "prepare", "prepare_documents"]
