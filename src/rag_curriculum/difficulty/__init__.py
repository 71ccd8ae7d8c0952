"""Difficulty axes: synthetic (distractors per level, RAG-RL 3.2) and accuracy-based (pass@k statistics)."""

from .synthetic import num_distractors

__all__ = ["num_distractors"]
