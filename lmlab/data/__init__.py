"""Data: tokenizers, corpora and token shards."""
