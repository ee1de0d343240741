"""Comparing pre-training objectives on one backbone: which is better, by how much, how sure.

`compare(...)` (also `lmlab.compare_objectives(...)`) runs a comparison as `lmlab compare`
does."""


def compare(objectives, budget, **options):
    """`lmlab.compare_objectives("mlm,clm", budget="1e14", data="data/mine", seeds=3,
    probes=["sst2=classify:train.tsv:dev.tsv"], pairs=["blimp/"])`: pre-train, score and
    judge every objective (every option: lmlab.compare.design.CompareConfig). Returns the
    Comparison: its analysis (table rows, verdicts, crossovers) and its record."""
    from lmlab.compare.design import CompareConfig
    from lmlab.compare.lab import compare as run_comparison

    progress = options.pop("progress", True)
    return run_comparison(CompareConfig.of(objectives, budget=str(budget), **options), progress)

