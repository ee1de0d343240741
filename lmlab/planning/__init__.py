"""Planning: sizing a pre-training run for a budget before spending it, each candidate size
counted, timed for a few steps on this machine and set against a Chinchilla-style fit
(`lmlab plan`, `lmlab.plan(...)`; the package is not named `plan`, which is that function)."""
