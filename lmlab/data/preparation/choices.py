"""The names `lmlab prepare` options choose among, kept apart from the modules that use them so
that the command line can offer them without importing numpy or tokenizers."""

NORMALISATIONS = ("NFC", "NFKC", "none")
SENTENCE_RULES = ("punctuation", "lines")
