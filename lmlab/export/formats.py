"""The export formats by the name `lmlab export --format` gives them."""

from __future__ import annotations

from lmlab.export.gguf_export import GGUF
from lmlab.export.hf_format import HF
from lmlab.export.st_export import SENTENCE_TRANSFORMERS
from lmlab.export.targets import Format

FORMATS: dict[str, Format] = {"hf": HF, "sentence-transformers": SENTENCE_TRANSFORMERS,
                              "gguf": GGUF}
