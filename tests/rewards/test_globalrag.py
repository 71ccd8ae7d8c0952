"""GlobalRAG's rewards on hand-made plans and trajectories against values computed by hand from the paper's
definitions (Eqs. 1-7): malformed traces, cycles, missing sub-answers, zero-search trajectories, the matching
rule and its tie-break; the annealing weight at the steps of the paper's training curves; the TRL interface
(``trainer_state`` feeds t, components logged); a real sentence-transformers embedder built on the spot."""

from __future__ import annotations

import json
import math
import types

import numpy as np
import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.methods.globalrag import plan_from_questions
from rag_curriculum.methods.globalrag._reward import (
    GlobalRagReward,
    anneal_weight,
    graph_edit_distance,
    max_common_matchings,
    structural_reward,
)
from rag_curriculum.rewards import get_reward

GOLD = plan_from_questions([("Who directed Up?", "#1", "Pete Docter"), ("When was #1 born?", "#2", "October 9, 1968")])
ANSWERS = ["October 9, 1968"]

# unit vectors chosen so every cosine below is known exactly
VECTORS = {
    "Who directed Up?": [1.0, 0.0],
    "When was #1 born?": [0.0, 1.0],
    "Who made Up?": [0.6, 0.8],
    "When was Pete Docter born?": [0.28, 0.96],
    "Where was #2?": [0.0, 1.0],
    "Is Up older?": [1.0, 0.0],
    "Is Cars older?": [0.0, 1.0],
}


class TableEmbedder:
    """An injected embedder: fixed vectors by text; counts its calls and the texts it embedded."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return np.array([VECTORS[t] for t in texts])


def reward(**kw):
    return GlobalRagReward(embedder=kw.pop("embedder", TableEmbedder()), **kw)


def trace(plan: dict, subs: list[tuple[str, str | None]], answer: str = "October 9, 1968") -> str:
    """A trajectory: the plan, one sub-plan per (query, binding) (query None: no search), the answer."""
    out = f"<think>plan</think><plan>{json.dumps(plan)}</plan>\n"
    for query, binding in subs:
        search = "" if query is None else (f"<search> {query} </search>\n\n<information>Doc 1(Title: Up) x"
                                           "</information>\n\n")
        sub = "" if binding is None else f"<subAnswer> {binding} </subAnswer>"
        out += f"<subPlan><think>go</think>{search}{sub}</subPlan>\n"
    return out + f"<answer> {answer} </answer>"


CHAIN = {"Q1": ["Who directed Up?", "#1"], "Q2": ["When was #1 born?", "#2"]}
SUBS = [("Up director", "#1 = Pete Docter"), ("Pete Docter born", "#2 = October 9, 1968")]


def one(text, *, step=0, gold=GOLD, answers=ANSWERS, **kw):
    return reward(**kw).components([text], [answers], gold_plan=[gold.to_dict()], step=step)[0]


# -- annealing -------------------------------------------------------------------------------------------------
def test_annealing_weight_at_the_paper_steps():
    # w_t = 1 / (1 + exp((t - 0.9 T) / 10)), T = 50 (appendix E.4): midpoint step 45; training runs 200 steps
    expected = {0: 1 / (1 + math.exp(-4.5)), 30: 1 / (1 + math.exp(-1.5)), 45: 0.5, 60: 1 / (1 + math.exp(1.5)),
                80: 1 / (1 + math.exp(3.5)), 100: 1 / (1 + math.exp(5.5)), 150: 1 / (1 + math.exp(10.5)),
                200: 1 / (1 + math.exp(15.5))}
    rounded = {0: 0.989, 30: 0.818, 45: 0.5, 60: 0.182, 80: 0.029, 100: 0.0041}  # ../shared/docs/COMPANIONS.md 3.3
    for t, w in expected.items():
        assert anneal_weight(t) == pytest.approx(w, rel=1e-12)
    for t, w in rounded.items():
        assert round(anneal_weight(t), 3 if t < 100 else 4) == w
    assert anneal_weight(150) < 3e-5 and anneal_weight(200) < 2e-7
    assert anneal_weight(90, T=100) == 0.5 and anneal_weight(100, T=100) == pytest.approx(0.268941, abs=1e-6)
    assert anneal_weight(10_000) == 0.0  # no overflow
    assert anneal_weight(3, schedule="constant") == 1.0  # the "w/o w_t" ablation
    assert anneal_weight(20, T=50, midpoint_ratio=0.5, temperature=5.0) == pytest.approx(1 / (1 + math.exp(-1)))
    with pytest.raises(ConfigError, match="schedule"):
        anneal_weight(1, schedule="linear")


# -- structure ------------------------------------------------------------------------------------------------
def test_graph_edit_distance_and_structural_reward_by_hand():
    single = plan_from_questions([("Who directed Up?", "#1")])
    loose = plan_from_questions([("A?", "#1"), ("B?", "#2")])
    chain3 = plan_from_questions([("A?", "#1"), ("B #1?", "#2"), ("C #2?", "#3")])
    fork = plan_from_questions([("A?", "#1"), ("B?", "#2"), ("C #1 #2?", "#3")])
    reverse = plan_from_questions([("B #2?", "#1"), ("A?", "#2")])
    loose4 = plan_from_questions([("A?", "#1"), ("B?", "#2"), ("C?", "#3"), ("D?", "#4")])
    branch4 = plan_from_questions([("A?", "#1"), ("B #1?", "#2"), ("C?", "#3"), ("D #2 #3?", "#4")])
    cases = [(GOLD, GOLD, 0), (single, GOLD, 2), (loose, GOLD, 1), (chain3, GOLD, 2), (fork, chain3, 2),
             (reverse, GOLD, 0),  # reverse: same shape once the nodes are renamed (GED ignores order)
             (loose4, branch4, 3), (branch4, branch4, 0)]  # three edges to insert; the same graph
    for pred, gold, d in cases:
        assert graph_edit_distance(pred, gold) == d
        n, e = len(gold.nodes), len(gold.edges)
        assert structural_reward(pred, gold) == pytest.approx(math.exp(-d / (n + e)))
    assert structural_reward(single, GOLD) == pytest.approx(math.exp(-2 / 3))
    assert structural_reward(None, GOLD) == 0.0


def test_the_bounded_search_finds_networkx_exact_distance():
    """The reward bounds networkx's search by one edit path's cost (0: the same graph): the distance is the plain
    call's, on random directed acyclic plans of up to 3 nodes."""
    import random

    import networkx as nx

    from rag_curriculum.methods.globalrag._reward import _ged, _graph

    rng = random.Random(0)

    def key():
        n = rng.randint(1, 3)
        return n, tuple(sorted((i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5))

    for _ in range(25):
        a, b = key(), key()
        assert _ged(a, b, None) == nx.graph_edit_distance(_graph(a), _graph(b)), (a, b)


@pytest.mark.slow
def test_the_exact_small_graph_distance_is_networkx_graph_edit_distance():
    """The permutation path (plans up to EXACT_MAX_NODES nodes) against networkx's graph_edit_distance on random
    directed graphs, acyclic or not: the plain call up to 5 nodes; at 6 nodes networkx's search bounded by the
    permutation path's value (it returns the true minimum when that is at most the bound, None when the bound is
    too low: an error either way fails); at 7 nodes distances known by hand."""
    import random
    import time

    import networkx as nx

    from rag_curriculum.methods.globalrag._reward import EXACT_MAX_NODES, _ged, _ged_small, _graph

    assert EXACT_MAX_NODES == 7
    rng = random.Random(7)

    def key(lo, hi):
        n, dag, p = rng.randint(lo, hi), rng.random() < 0.5, rng.choice([0.2, 0.4, 0.6])
        return n, tuple((i, j) for i in range(n) for j in range(n) if i != j and (i < j or not dag)
                        and rng.random() < p)

    for lo, hi, pairs in ((1, 4, 60), (5, 5, 16)):
        for _ in range(pairs):
            a, b = key(lo, hi), key(lo, hi)
            assert _ged_small(a, b) == nx.graph_edit_distance(_graph(a), _graph(b)), (a, b)
            assert _ged(a, b, None) == _ged_small(a, b)
    for _ in range(4):
        a, b = key(6, 6), key(5, 6)
        d = _ged_small(a, b)
        assert nx.graph_edit_distance(_graph(a), _graph(b), upper_bound=d) == d, (a, b)
    chain = (7, tuple((i, i + 1) for i in range(6)))
    t0 = time.perf_counter()
    assert _ged_small((7, ()), chain) == 6  # six edges to insert
    assert _ged_small((7, tuple((i + 1, i) for i in range(6))), chain) == 0  # the chain reversed: renamed
    assert _ged_small((7, ((0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6))), chain) == 10  # star: 5 kept at most 1
    assert time.perf_counter() - t0 < 1.0


def test_maximum_common_subgraph_matchings():
    loose = plan_from_questions([("A?", "#1"), ("B?", "#2")])
    # edgeless against a chain: one node at most; every single pair, in DFS order
    assert max_common_matchings(loose, GOLD) == (((0, 0),), ((0, 1),), ((1, 0),), ((1, 1),))
    chain3 = plan_from_questions([("A?", "#1"), ("B #1?", "#2"), ("C #2?", "#3")])
    assert max_common_matchings(chain3, GOLD) == (((0, 0), (1, 1)), ((0, 1), (1, 2)))
    assert max_common_matchings(GOLD, GOLD) == (((0, 0), (1, 1)),)


# -- every term on hand-made trajectories --------------------------------------------------------------------
def test_a_perfect_trajectory():
    b = one(trace(CHAIN, SUBS))
    assert (b.form, b.structure, b.semantic, b.step, b.answer) == (1.0, 1.0, pytest.approx(1.0), 1.0, 1.0)
    w0 = 1 / (1 + math.exp(-4.5))
    assert b.weight == pytest.approx(w0) and b.total == pytest.approx(w0 * (0.1 + 0.5 + 0.5 + 0.5) + 1)
    late = one(trace(CHAIN, SUBS), step=200)
    assert late.total == pytest.approx(1 + 1.6 / (1 + math.exp(15.5)))


def test_independent_sub_questions_against_a_chain_and_the_tie_break():
    plan = {"Q1": ["Who made Up?", "#1"], "Q2": ["When was Pete Docter born?", "#2"]}
    text = trace(plan, SUBS)
    b = one(text, step=45)
    # GED 1 (one edge to insert); one node matched: (gold #2, pred #2) has the largest cosine, 0.96
    assert b.form == 1.0 and b.matched == 1
    assert b.structure == pytest.approx(math.exp(-1 / 3))
    assert b.semantic == pytest.approx(0.96 / 2) and b.step == pytest.approx(1 / 2)
    assert b.total == pytest.approx(0.5 * (0.1 + 0.5 * math.exp(-1 / 3) + 0.5 * 0.48 + 0.5 * 0.5) + 1)
    first = one(text, step=45, tie_break="order")  # the first matching found: (gold #1, pred #1), cosine 0.6
    assert first.semantic == pytest.approx(0.6 / 2) and first.step == pytest.approx(1 / 2)


def test_a_cyclic_plan_earns_the_answer_only():
    plan = {"Q1": ["Who directed #2?", "#1"], "Q2": ["When was #1 born?", "#2"]}
    b = one(trace(plan, SUBS))
    assert (b.form, b.structure, b.semantic, b.step, b.answer, b.total) == (0.0, 0.0, 0.0, 0.0, 1.0, 1.0)


def test_a_missing_sub_answer():
    b = one(trace(CHAIN, [SUBS[0], ("Pete Docter born", None)]))
    # R_form 0 (sub-plan without sub-answer, #2 never answered); #2's F1 counts 0 in R_step
    assert (b.form, b.structure, b.semantic, b.step) == (0.0, 1.0, pytest.approx(1.0), 0.5)
    assert b.total == pytest.approx(anneal_weight(0) * (0.5 + 0.5 + 0.25) + 1)


def test_a_partial_sub_answer_scores_its_f1():
    b = one(trace(CHAIN, [SUBS[0], ("Pete Docter born", "#2 = October 9")]))
    # F1("October 9", "October 9, 1968") = 2 * 1 * (2/3) / (1 + 2/3) = 0.8
    assert b.form == 1.0 and b.step == pytest.approx((1 + 0.8) / 2)


def test_a_zero_search_trajectory():
    b = one(trace(CHAIN, [(None, SUBS[0][1]), (None, SUBS[1][1])]))
    # Figure 7 asks a <search> in every sub-plan: R_form 0; the plan and sub-answer terms still count
    assert (b.form, b.structure, b.step, b.answer) == (0.0, 1.0, 1.0, 1.0)
    assert b.total == pytest.approx(anneal_weight(0) * 1.5 + 1)
    assert one(trace(CHAIN, [(None, SUBS[0][1]), (None, SUBS[1][1])]), require_search=False).form == 1.0


@pytest.mark.parametrize("text", ["I think it is October 9, 1968.", "<plan>not json</plan><answer>x</answer>", ""])
def test_malformed_traces_score_zero(text):
    b = one(text)
    assert (b.form, b.structure, b.semantic, b.step, b.answer, b.total) == (0.0,) * 6


def test_a_longer_plan_and_a_wrong_answer():
    plan = {**CHAIN, "Q3": ["Where was #2?", "#3"]}
    b = one(trace(plan, [*SUBS, ("where", "#3 = Kansas City")], answer="Kansas City"))
    assert b.structure == pytest.approx(math.exp(-2 / 3))  # one node and one edge deleted
    assert b.semantic == pytest.approx(1.0) and b.step == pytest.approx(1.0) and b.matched == 2
    assert b.answer == 0.0 and b.total == pytest.approx(anneal_weight(0) * (0.1 + 0.5 * math.exp(-2 / 3) + 1.0))


def test_a_comparison_plan_without_gold_sub_answers():
    gold = plan_from_questions([("Is Up older?", "#1"), ("Is Cars older?", "#2")])
    plan = {"Q1": ["Is Cars older?", "#1"], "Q2": ["Is Up older?", "#2"]}  # listed the other way round
    b = one(trace(plan, [("cars", "#1 = 2006"), ("up", "#2 = 2009")], answer="Up"), gold=gold, answers=["Up"])
    assert (b.structure, b.semantic, b.step, b.answer) == (1.0, pytest.approx(1.0), 0.0, 1.0)


# -- the TRL interface ----------------------------------------------------------------------------------------
def test_trl_call_reads_the_trainer_step_and_logs_components(tmp_path):
    from rag_curriculum.methods.globalrag import write_plans

    plans = tmp_path / "plans.jsonl"
    write_plans(plans, [{"id": "q1", **GOLD.to_dict()}])
    emb = TableEmbedder()
    r = get_reward("globalrag", plans=str(plans), embedder=emb)
    logged: dict[str, float] = {}
    texts = [trace(CHAIN, SUBS), "nothing"]
    traj = [{"segments": [{"source": "model", "text": texts[0]}]}, None]
    got = r(["ignored", texts[1]], answers=[ANSWERS, ANSWERS], source_id=["q1", "q1"], trajectory=traj,
            trainer_state=types.SimpleNamespace(global_step=45), log_metric=logged.__setitem__)
    assert got == [pytest.approx(0.5 * 1.6 + 1), 0.0]
    assert logged["globalrag/weight"] == 0.5 and logged["globalrag/form"] == 0.5
    assert logged["globalrag/total"] == pytest.approx((0.5 * 1.6 + 1) / 2) and logged["globalrag/no_gold_plan"] == 0
    assert emb.calls == [["Who directed Up?", "When was #1 born?"]]  # each distinct text once per batch
    r(texts, answers=[ANSWERS, ANSWERS], source_id=["q1", "q1"])
    assert len(emb.calls) == 1  # cached across calls
    assert r(texts, answers=[ANSWERS, ANSWERS], source_id=["q1", "q1"])[0] == pytest.approx(
        anneal_weight(0) * 1.6 + 1)  # no trainer state: t = 0
    for name, value in (("globalrag-format", 1.0), ("globalrag-structure", 1.0), ("globalrag-step", 1.0),
                        ("globalrag-answer", 1.0), ("globalrag-semantic", 1.0)):
        comp = get_reward(name, plans=str(plans), embedder=TableEmbedder())
        assert comp(texts[:1], answers=[ANSWERS], id=["q1"]) == [pytest.approx(value)]
    with pytest.raises(ConfigError, match="no gold plan for completion 0 \\(source_id 'q9'\\)"):
        r(texts[:1], answers=[ANSWERS], source_id=["q9"])
    zero = get_reward("globalrag", plans=str(plans), embedder=emb, missing_plan="zero")
    assert zero(texts[:1], answers=[ANSWERS], source_id=["q9"]) == [1.0 + anneal_weight(0) * 0.1]
    with pytest.raises(ConfigError, match="tie_break"):
        get_reward("globalrag", tie_break="random")
    with pytest.raises(ConfigError, match="gold answers"):
        r(texts[:1], source_id=["q1"])


def test_sentence_transformers_embedder_on_a_model_built_on_the_spot(tiny_model_dir):
    pytest.importorskip("sentence_transformers", reason="the globalrag extra installs sentence-transformers")
    from rag_curriculum.methods.globalrag._reward import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder(str(tiny_model_dir), prefix="query: ", device="cpu")
    v = emb(["Who directed Up?", "When was #1 born?"])
    assert v.shape[0] == 2 and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    b = one(trace(CHAIN, SUBS), embedder=emb)
    assert b.semantic == pytest.approx(1.0, abs=1e-5)  # identical sub-questions
    plan = {"Q1": ["Who made Up?", "#1"], "Q2": ["When was #1 born?", "#2"]}
    cos = float(v[0] @ emb(["Who made Up?"])[0])
    assert one(trace(plan, SUBS), embedder=emb).semantic == pytest.approx((cos + 1) / 2, abs=1e-5)
