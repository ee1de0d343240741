"""Evaluating a trained run: perplexity, pseudo-perplexity, bits per byte, minimal pairs."""
