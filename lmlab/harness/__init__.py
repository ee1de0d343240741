"""Outside evaluation suites run on a run through lmlab's own scoring and generation:
lm-evaluation-harness (`lmlab eval --harness`)."""
