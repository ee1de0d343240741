"""The task vocabulary, below every package that reads it (finetune/, distill/, export/,
serve/, compare/, planning/): each task's traits, the formats its examples come in and the
splits they are read into, the fine-tuning settings and the named tasks that select them, the
one framing of rows "as the run was trained", the metrics a task is scored by and the
bag-of-words floor scored by them. It imports nothing above it: no training, no run, no
model."""
