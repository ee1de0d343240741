"""`prepare`: text sources → a dataset directory that training reads fast.

    DIR/tokenizer.json          trained here (bpe, wordpiece, unigram) or the one given, with
                                lmlab's special tokens and sentinels
    DIR/SPLIT.tokens.bin, SPLIT.documents.npy, SPLIT.sentences.npy   for train and validation
                                (see shards.py)
    DIR/meta.json               versions, the recipe, the input files, documents in and out of
                                every step, file hashes, token statistics
    DIR/stats.txt               the same counts and statistics, for people

entry.py holds the ways in (prepare, prepare_documents, open_or_prepare); recipe.py what
is done, as one record (choices.py: the names its options choose among); the steps: cleaning.py
(near_dedup.py), mixing.py, split_check.py, sentences.py, tokenizer_training.py; parallel.py
and streaming.py run them on every core; directory.py keeps the directory's life (staging,
reuse, locks); encode.py what both engines share (the tokenizer, encoding into shards,
meta.json's records), stats.py what the directory holds, in numbers; the engines: builtin.py
(one machine, every core) and datatrove.py (a datatrove pipeline, local or on Ray).
"""

from lmlab.lazy import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "Engine": "lmlab.data.preparation.datatrove", "is_complete": "lmlab.data.preparation.directory",
    **dict.fromkeys(("open_or_prepare", "prepare", "prepare_documents"),
                    "lmlab.data.preparation.entry"),
})

__all__ = ["Engine", "is_complete", "open_or_prepare", "prepare", "prepare_documents"]
