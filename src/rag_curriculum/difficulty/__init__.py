"""Difficulty axes: synthetic (distractors per level, RAG-RL 3.2) and accuracy-based (pass@k statistics from
stored per-question counts, RAG-RL 4.4.2 and appendix A)."""

from .accuracy import balance, bucket_of, is_learnable, pass_at_k, pass_at_k_curve, question_stats
from .synthetic import collapsed_levels, level_for, levels_as_built, num_distractors, shown_level

__all__ = ["balance", "bucket_of", "collapsed_levels", "is_learnable", "level_for", "levels_as_built",
           "num_distractors", "pass_at_k", "pass_at_k_curve", "question_stats", "shown_level"]
