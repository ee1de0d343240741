"""The user's text, read: rows of text from files of every format (readers.py, the one way
in), and the built-in corpus; what `prepare`, evaluation, minimal pairs and fine-tuning read
their inputs through.

readers.py chooses a reader by suffix (row_formats.py: JSONL, JSON, CSV/TSV, Parquet, text;
json_stream.py streams a large JSON file); builtin_corpus.py is the prose every Python
installation ships. Nothing here imports the rest of data/ but errors.py.
"""
