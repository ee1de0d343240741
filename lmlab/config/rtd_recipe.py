"""`--rtd-recipe`: the settings replaced-token detection trains with. `lmlab` keeps lmlab's
defaults; `electra` gives ELECTRA's pre-training recipe (Clark et al. 2020, appendix A;
google-research/electra's configure_pretraining.py) to each field that the config file and
the options leave out, so a field given explicitly wins (applied where settings are read:
lmlab.config.parsing.resolve_config, for the command line, files and `lmlab.pretrain`; a
TrainConfig built directly holds just the fields it is given). Against lmlab's settings at
50 steps of modernbert-mini it made no detectable difference to the discriminator
(benchmarks/results/rtd_recipe.json).

Both recipes sample the generator at temperature 1 with the original token allowed, as
ELECTRA does by default (`--rtd-temperature`, `--rtd-disallow-correct`)."""

from __future__ import annotations

RTD_RECIPES: dict[str, dict[str, object]] = {
    "lmlab": {},
    "electra": {
        "optimizer": "adamw", "beta2": 0.999, "weight_decay": 0.01,
        "schedule": "linear", "lr_floor": 0.0,  # after the warm-up, straight down to zero
        "embedding_lr_scale": 1.0,
        # the generator's input: exactly 15% of the tokens, 85% of those [MASK], 15% kept
        "mlm_rate": 0.15, "mlm_selection": "exact", "mask_prob": 0.85, "random_prob": 0.0,
    },
}
# The electra recipe warms the learning rate up over this share of the run (--warmup-steps
# none), lmlab's over 5%. ELECTRA's own warm-up is 10,000 steps, 1 to 2.5% of its runs of
# 400k to 1M steps: as long in steps, a warm-up would fill a short run, as a share it would
# round to nothing, so lmlab takes a tenth, twice its own share.
ELECTRA_WARMUP_SHARE = 0.1


def recipe_settings(values: dict) -> dict[str, object]:
    """The settings the `rtd_recipe` among `values` gives (none for lmlab's, or for a name
    that is no recipe: the config refuses that with the choices)."""
    return RTD_RECIPES.get(values.get("rtd_recipe") or "lmlab", {})
