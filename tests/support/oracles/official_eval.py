"""The official evaluation code, transcribed once: the reference that the toolkit's metrics are tested against
(tests/rewards/test_metrics.py) and the baseline the reward benchmark measures against (bench/bench_rewards.py).

- SQuAD v1.1 ``evaluate-v1.1.py``: ``normalize_answer``, ``f1_score``, ``exact_match_score``.
- HotpotQA ``hotpot_evaluate_v1.py``: the same normalisation, ``f1_score`` with its yes / no / noanswer rule,
  and ``update_sp`` (supporting-fact precision / recall / F1).
- MuSiQue ``metrics/answer.py``: the maximum over the answer and its aliases.
"""

from __future__ import annotations

import re
import string
from collections import Counter


# --- official HotpotQA hotpot_evaluate_v1.py (normalize_answer and exact match are SQuAD v1.1's), transcribed ---
def ref_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def ref_f1_score(prediction, ground_truth):
    normalized_prediction = ref_normalize_answer(prediction)
    normalized_ground_truth = ref_normalize_answer(ground_truth)

    ZERO_METRIC = (0, 0, 0)

    if normalized_prediction in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC
    if normalized_ground_truth in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC

    prediction_tokens = normalized_prediction.split()
    ground_truth_tokens = normalized_ground_truth.split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return ZERO_METRIC
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1, precision, recall


def ref_exact_match_score(prediction, ground_truth):
    return ref_normalize_answer(prediction) == ref_normalize_answer(ground_truth)


def ref_update_sp(prediction, gold):
    """HotpotQA's supporting-fact precision / recall / F1 (update_sp), on citation labels."""
    cur_sp_pred = set(prediction)
    gold_sp_pred = set(gold)
    tp, fp, fn = 0, 0, 0
    for e in cur_sp_pred:
        if e in gold_sp_pred:
            tp += 1
        else:
            fp += 1
    for e in gold_sp_pred:
        if e not in cur_sp_pred:
            fn += 1
    prec = 1.0 * tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = 1.0 * tp / (tp + fn) if tp + fn > 0 else 0.0
    f1 = 2 * prec * recall / (prec + recall) if prec + recall > 0 else 0.0
    return prec, recall, f1


# --- MuSiQue's official evaluation (metrics/answer.py): maximum over the answer and its aliases ---
def ref_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


# --- SQuAD v1.1 f1_score (no yes/no rule): the benchmark's baseline ---
def squad_f1_score(prediction, ground_truth):
    prediction_tokens = ref_normalize_answer(prediction).split()
    ground_truth_tokens = ref_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def ref_f1(prediction, answers):
    return ref_metric_max_over_ground_truths(lambda p, g: ref_f1_score(p, g)[0], prediction, answers)


def ref_em(prediction, answers):
    return float(ref_metric_max_over_ground_truths(ref_exact_match_score, prediction, answers))
