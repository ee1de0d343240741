"""Comparing pre-training objectives on one backbone: which is better, by how much, how sure."""
