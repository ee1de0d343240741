"""Configuration, at the bottom of the import graph: typed frozen dataclasses (model.py,
training.py, the objective's options in objective_options.py), the named model sizes
(presets.py), a run's budgets of steps, tokens and minutes (budget.py; the compute a plan
sizes a run for is lmlab.planning's), field help (fields.py), generic parsing (parsing.py),
settings files (settings_file.py), options generated from the fields (options.py) and the
settings `--rtd-recipe` names (rtd_recipe.py). It
imports nothing of lmlab outside config/, so parsing a config loads no other package; what a
config leaves to "auto" is resolved where the run's device and objective are known
(lmlab/train/setup.py)."""

from lmlab.config.model import ModelConfig

__all__ = ["ModelConfig"]
