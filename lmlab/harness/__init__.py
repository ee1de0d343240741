"""Outside evaluation suites run on a run through lmlab's own scoring, generation and
embedding: lm-evaluation-harness (`lmlab eval --harness`) and MTEB (`lmlab eval --mteb`)."""
