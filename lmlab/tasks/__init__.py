"""The task vocabulary, below every package that reads it (finetune/, distill/, export/,
serve/, compare/): each task's traits, the formats its examples come in, the one framing of
rows "as the run was trained", and the metrics a task is scored by. It imports nothing above
it: no training, no run, no model."""
