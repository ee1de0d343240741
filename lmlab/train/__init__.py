"""Training: the loop and its pure helpers (optimiser, schedule, checkpoints)."""
