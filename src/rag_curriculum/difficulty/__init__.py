"""Difficulty axes: synthetic (distractors per level, RAG-RL 3.2) and accuracy-based (pass@k statistics from
stored per-question counts, RAG-RL 4.4.2 and appendix A)."""

from .accuracy import balance, bucket_of, is_learnable, pass_at_k, pass_at_k_curve, question_stats
from .synthetic import level_for, num_distractors

__all__ = ["balance", "bucket_of", "is_learnable", "level_for", "num_distractors", "pass_at_k", "pass_at_k_curve",
           "question_stats"]
