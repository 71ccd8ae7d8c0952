"""The pass@k estimator, correct-sample counting, bucketing and balancing (difficulty/accuracy.py), with exact
expected values."""

from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_curriculum.difficulty.accuracy import (
    ANSWERABLE,
    UNANSWERABLE,
    balance,
    bucket_of,
    count_correct,
    is_learnable,
    pass_at_k,
    pass_at_k_curve,
    question_stats,
)


def exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def human_eval(n: int, c: int, k: int) -> float:
    """openai/human-eval's estimate_pass_at_k, verbatim."""
    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


@pytest.mark.parametrize(("n", "c", "k", "want"), [
    (8, 0, 1, Fraction(0)), (8, 8, 1, Fraction(1)), (8, 1, 8, Fraction(1)), (8, 0, 8, Fraction(0)),
    (8, 2, 1, Fraction(1, 4)), (8, 2, 2, Fraction(13, 28)), (8, 2, 4, Fraction(11, 14)), (8, 7, 2, Fraction(1)),
    (10, 3, 1, Fraction(3, 10)), (5, 1, 5, Fraction(1)), (1, 1, 1, Fraction(1)), (1, 0, 1, Fraction(0)),
])
def test_pass_at_k_exact_values(n, c, k, want):
    assert pass_at_k(n, c, k) == float(want)  # correctly rounded, not merely close


def test_pass_at_k_matches_the_definition_and_human_eval_everywhere_small():
    checked = 0
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got = pass_at_k(n, c, k)
                assert got == float(exact(n, c, k))
                assert got == pytest.approx(human_eval(n, c, k), abs=1e-12)
                checked += 1
    assert checked == sum(n * (n + 1) for n in range(1, 21))


@given(n=st.integers(1, 3000), data=st.data())
def test_pass_at_k_large_n_is_stable_and_monotone(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    v = pass_at_k(n, c, k)
    assert 0.0 <= v <= 1.0
    assert v == pytest.approx(float(exact(n, c, k)), abs=1e-9)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= v - 1e-12  # more tries never hurt
    if c < n:
        assert pass_at_k(n, c + 1, k) >= v - 1e-12  # more correct samples never hurt


def test_pass_at_1_is_the_pass_rate_and_pass_at_n_is_any_correct():
    for n in range(1, 12):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == c / n
            assert pass_at_k(n, c, n) == (1.0 if c else 0.0)


@pytest.mark.parametrize(("args", "error"), [
    ((0, 0, 1), ValueError), ((4, 5, 1), ValueError), ((4, -1, 1), ValueError), ((4, 2, 0), ValueError),
    ((4, 2, 5), ValueError), ((4.0, 2, 1), TypeError), ((4, True, 1), TypeError),
])
def test_pass_at_k_rejects_bad_arguments(args, error):
    with pytest.raises(error):
        pass_at_k(*args)


def test_curve():
    assert pass_at_k_curve(4, 1) == [0.25, 0.5, 0.75, 1.0]
    assert pass_at_k_curve(3, 0) == [0.0, 0.0, 0.0]
    assert pass_at_k_curve(3, 3) == [1.0, 1.0, 1.0]


def test_count_correct_threshold_and_strict_format():
    f1 = [1.0, 0.999999, 0.5, 1.0, 0.0]
    assert count_correct(f1) == 2
    assert count_correct(f1, correct_f1=0.5) == 4
    assert count_correct(f1, valid=[True, True, True, False, True]) == 1
    assert count_correct([1.0 - 1e-12]) == 1  # floating-point noise on an exact 1 still counts
    with pytest.raises(ValueError):
        count_correct([1.0], valid=[True, False])


@pytest.mark.parametrize(("f1", "bucket", "learnable", "c"), [
    ([0.0, 0.0, 0.0, 0.0], UNANSWERABLE, False, 0),
    ([0.9, 0.5, 0.99, 0.0], UNANSWERABLE, False, 0),  # partial credit is not an answer (max F1 < 1)
    ([1.0, 0.0, 0.0, 0.0], ANSWERABLE, True, 1),
    ([1.0, 1.0, 0.4, 1.0], ANSWERABLE, True, 3),
    ([1.0, 1.0, 1.0, 1.0], ANSWERABLE, False, 4),  # all right: no GRPO advantage either
])
def test_question_stats_buckets(f1, bucket, learnable, c):
    s = question_stats(f1)
    assert (s.n, s.c, s.bucket, s.learnable) == (4, c, bucket, learnable)
    assert s.max_f1 == max(f1) and s.mean_f1 == pytest.approx(sum(f1) / 4)
    assert s.pass_rate == c / 4 and s.pass_at_k == tuple(pass_at_k_curve(4, c))
    assert (s.max_f1 >= 1.0) == (bucket == ANSWERABLE)


def test_bucket_helpers():
    assert bucket_of(0) == UNANSWERABLE and bucket_of(3) == ANSWERABLE
    assert not is_learnable(8, 0) and is_learnable(8, 1) and is_learnable(8, 7) and not is_learnable(8, 8)
    with pytest.raises(ValueError):
        question_stats([])


def test_balance_clips_the_larger_bucket_to_the_smaller_keeping_order():
    ans = [f"a{i}" for i in range(10)]
    una = ["u0", "u1", "u2"]
    a, u = balance(ans, una, seed=0)
    assert u == una and len(a) == 3
    assert a == sorted(a, key=ans.index) and set(a) <= set(ans)
    assert balance(ans, una, seed=0) == (a, u)  # deterministic
    others = {tuple(balance(ans, una, seed=s)[0]) for s in range(20)}
    assert len(others) > 1  # the seed matters
    a2, u2 = balance(una, ans, seed=0)
    assert a2 == una and len(u2) == 3
    assert balance([], ans, seed=1) == ([], [])
    assert balance(ans, ans[:], seed=1) == (ans, ans)


def test_balance_exact_draw_is_pinned():
    """The draw is part of the outputs' reproducibility: a change here changes every balanced partition."""
    a, u = balance(list(range(8)), [100, 101, 102], seed=0)
    assert u == [100, 101, 102]
    assert a == [1, 5, 6]
    assert pickle.loads(pickle.dumps(question_stats([1.0, 0.0]))) == question_stats([1.0, 0.0])
