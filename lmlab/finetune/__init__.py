"""Fine-tuning a run on a labelled task: classify, pairs, regress, qa, ner."""
