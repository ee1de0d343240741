"""Configuration, at the bottom of the import graph: typed frozen dataclasses (model.py), field
help (fields.py), generic parsing (parsing.py), settings files (settings_file.py) and options
generated from the fields (options.py). Nothing needs train/ or data/ to parse a config."""

from lmlab.config.model import ModelConfig

__all__ = ["ModelConfig"]
