"""Distillation: a smaller student taught by a teacher run (`lmlab distill`)."""
