"""Benchmark: GlobalRAG's reward (graph edit distance + embeddings) batched, against a straightforward
per-trajectory implementation of the same definitions, on the same trajectories, in the same run.

    python bench/bench_globalrag.py                  # 1,280 trajectories (one step of the recipe: 256 x 5)
    python bench/bench_globalrag.py --n 2560 --embedder PATH/TO/e5-base   # a real E5 checkpoint, if at hand

Trajectories are made from the gold plans of the real records in ../shared/data (MuSiQue decompositions, 2Wiki
evidences, HotpotQA supporting facts; seeded): the gold plan itself, a node dropped or added, the dependencies
dropped, sub-questions reworded, sub-answers missing or wrong, a cycle, a wrong final answer, a malformed trace.
The embedder is a sentence-transformers model: by default the tiny random Qwen2-style model of the tests built on
the spot (nothing downloaded), or ``--embedder``. E5-base's forward pass costs more per text: on one CPU thread
batching then saves little more than the repeated texts, on a GPU it saves most of the per-call cost.

* **per trajectory** (the baselines): for each trajectory, parse it, the graph edit distance of its two graphs, the
  DFS over matchings, one ``encode`` call for its sub-questions: what a reward written one trajectory at a time
  computes. Two of them: **with networkx** (``networkx.graph_edit_distance``, the straightforward implementation
  the issue names) and **with the reward's distance** (the same function as the batched reward's: exact, with its
  shortcuts; the ratio against it measures batching and caching alone);
* **batched** (:class:`GlobalRagReward`, called as TRL calls it on the batch): GED and matchings once per distinct
  pair of plan structures, every distinct sub-question of the batch embedded in one call. Caches are cleared
  before it runs (a cold first step); then a second batch of new trajectories of the same questions is scored
  with the caches as the first left them (a later step of training).

The two must agree on every term (checked), and the target is a per-trajectory cost at least 10x lower.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from rag_curriculum import load_examples  # noqa: E402
from rag_curriculum._metrics import answer_f1, answer_scores  # noqa: E402
from rag_curriculum.methods.globalrag import Plan, parse_globalrag  # noqa: E402
from rag_curriculum.methods.globalrag import _reward as G  # noqa: E402
from rag_curriculum.methods.globalrag._agent import gold_plan  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SOURCES = [
    ("musique", DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"),
    ("hotpotqa", DATA / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"),
    ("2wikimultihopqa", DATA / "2wikimultihopqa" / "train.sample500.json"),
]
WORDS = ["exactly", "first", "in the film", "precisely", "of the show", "originally"]


def make_rows() -> list[dict]:
    rows = []
    for name, path in SOURCES:
        for ex in load_examples(name, path):
            p = gold_plan(ex)
            if p is not None:
                rows.append({"id": ex.id, "answers": list(ex.answers), "plan": p})
    return rows


def make_trajectory(rng: random.Random, plan: Plan, answer: str) -> str:
    """A GlobalRAG trajectory built from a gold plan, perturbed (see the module docstring)."""
    nodes = [[n.question, n.placeholder, n.answer or "unknown"] for n in plan.nodes]
    kind = rng.random()
    if kind < 0.15 and len(nodes) > 1:
        nodes.pop()  # a node dropped (its references fall with it)
        nodes = [[q.replace(f"#{len(nodes) + 1}", "it"), ph, a] for q, ph, a in nodes]
    elif kind < 0.3:
        nodes.append([f"What else about #{len(nodes)}?", f"#{len(nodes) + 1}", "something"])  # a node added
    elif kind < 0.45:
        nodes = [[q.replace("#", "number "), ph, a] for q, ph, a in nodes]  # no dependencies
    if rng.random() < 0.5:
        nodes = [[f"{q} {rng.choice(WORDS)}", ph, a] for q, ph, a in nodes]  # reworded
    if rng.random() < 0.05:
        nodes[0][0] += f" #{len(nodes)}" if len(nodes) > 1 else " #1"  # a cycle
    plan_json = json.dumps({f"Q{i + 1}": [q, ph] for i, (q, ph, _) in enumerate(nodes)})
    out = f"<think>Let me plan.</think>\n<plan>{plan_json}</plan>\n"
    for q, ph, a in nodes:
        if rng.random() < 0.1:
            continue  # a missing sub-answer
        sub = a if rng.random() < 0.7 else rng.choice(["no", "1952", "the United States"])
        out += (f"<subPlan><think>next</think><search> {q} </search>\n\n<information>Doc 1(Title: T) some text"
                f"</information>\n\n<think>found</think><subAnswer> {ph} = {sub} </subAnswer></subPlan>\n")
    final = answer if rng.random() < 0.5 else rng.choice(["no", "1952", "Paris"])
    out += f"<think>done</think>\n<answer> {final} </answer>"
    if rng.random() < 0.05:
        out = out[: rng.randint(20, len(out) - 1)]  # truncated
    return out


def networkx_ged(pred: tuple, gold: tuple) -> float:
    """networkx's graph edit distance of two plan structures (unit costs, structure only)."""
    import networkx as nx

    return nx.graph_edit_distance(G._graph(pred), G._graph(gold))


def reward_ged(pred: tuple, gold: tuple) -> float:
    """The reward's distance function, called afresh (no cache)."""
    return G._ged(pred, gold, None)


def per_trajectory(text: str, gold: Plan, answers: list[str], embed, reward: G.GlobalRagReward, step: float,
                   ged=reward_ged):
    """The straightforward implementation: one trajectory at a time, nothing shared or cached."""
    import numpy as np

    tr = parse_globalrag(text)
    em = answer_scores(tr.answer, answers)[0] if tr.answer else 0.0
    form = float(tr.valid)
    s_str = s_sem = s_step = 0.0
    if tr.plan is not None:
        d = ged(tr.plan.key, gold.key)
        s_str = math.exp(-d / (len(gold.nodes) + len(gold.edges)))
        maps = G._matchings(tr.plan.key, gold.key)
        texts = list(dict.fromkeys([n.question for n in tr.plan.nodes] + [n.question for n in gold.nodes]))
        vec = np.asarray(embed(texts), dtype=np.float32)
        vec = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
        at = {t: v for t, v in zip(texts, vec, strict=True)}
        best, best_sims = maps[0], None
        for m in maps:
            sims = [float(at[tr.plan.nodes[pj].question] @ at[gold.nodes[gi].question]) for gi, pj in m]
            if best_sims is None or sum(sims) > sum(best_sims) + 1e-9:
                best, best_sims = m, sims
        s_sem = sum(best_sims or []) / len(gold.nodes)
        known = [n for n in gold.nodes if n.answer is not None]
        if known:
            tot = sum(answer_f1(tr.sub_answers[tr.plan.nodes[pj].placeholder], [gold.nodes[gi].answer])
                      for gi, pj in best if gold.nodes[gi].answer is not None
                      and tr.sub_answers.get(tr.plan.nodes[pj].placeholder))
            s_step = tot / len(known)
    w = reward.weight(step)
    return (form, s_str, s_sem, s_step, em, w * (0.1 * form + 0.5 * (s_str + s_sem + s_step)) + em)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1280, help="trajectories (default: one step of the recipe, 256 x 5)")
    ap.add_argument("--embedder", default=None, help="a sentence-transformers model (default: the tiny test model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the embedder, the same for both "
                    "(default 1: on a shared 2-core machine more threads slow a 64-text batch 10x)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)

    if args.embedder is None:
        from support.tiny_model import build_tiny_model

        args.embedder = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="bench-globalrag-")), DATA))
    rows = make_rows()
    rng = random.Random(args.seed)
    picked = [rows[rng.randrange(len(rows))] for _ in range(math.ceil(args.n / 5))]
    batch = [(r, make_trajectory(rng, r["plan"], r["answers"][0])) for r in picked for _ in range(5)][: args.n]
    texts = [t for _, t in batch]
    answers = [r["answers"] for r, _ in batch]
    plans = [r["plan"].to_dict() for r, _ in batch]
    embedder = G.SentenceTransformerEmbedder(args.embedder, device="cpu")
    embedder(["warm up"])  # the model loaded once, outside both timings
    reward = G.GlobalRagReward(embedder=embedder)

    networkx_ged((2, ((0, 1),)), (3, ((0, 1), (1, 2))))  # networkx's first call (lazy imports) outside the timings
    t0, c0 = time.perf_counter(), time.process_time()
    base_nx = [per_trajectory(t, r["plan"], r["answers"], embedder, reward, 10.0, networkx_ged) for r, t in batch]
    t_nx, c_nx = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    base = [per_trajectory(t, r["plan"], r["answers"], embedder, reward, 10.0) for r, t in batch]
    t_base, c_base = time.perf_counter() - t0, time.process_time() - c0

    G._ged_cached.cache_clear()
    G._matchings_cached.cache_clear()
    t0, c0 = time.perf_counter(), time.process_time()
    got = reward.components(texts, answers, gold_plan=plans, step=10.0)
    t_batch, c_batch = time.perf_counter() - t0, time.process_time() - c0

    # a later step: other trajectories of the same distribution, the caches as the first step left them
    later = [(r, make_trajectory(rng, r["plan"], r["answers"][0])) for r in picked for _ in range(5)][: args.n]
    t0, c0 = time.perf_counter(), time.process_time()
    reward.components([t for _, t in later], [r["answers"] for r, _ in later],
                      gold_plan=[r["plan"].to_dict() for r, _ in later], step=11.0)
    t_later, c_later = time.perf_counter() - t0, time.process_time() - c0

    worst = max(abs(a - b) for ref in (base, base_nx) for x, y in zip(ref, got, strict=True)
                for a, b in zip(x, (y.form, y.structure, y.semantic, y.step, y.answer, y.total), strict=True))
    assert worst < 1e-4, f"the two implementations disagree by {worst}"
    shapes = len({(r["plan"].key, parse_globalrag(t).plan.key if parse_globalrag(t).plan else None)
                  for r, t in batch})
    valid = sum(b.form for b in got) / len(got)
    print(f"{len(batch)} trajectories from {len(rows)} gold plans of the shared data ({valid:.0%} well-formed, "
          f"{shapes} distinct (predicted, gold) structure pairs); embedder {Path(args.embedder).name}")
    n = len(batch)
    print(f"{'':34s} {'wall s':>8s} {'CPU s':>8s} {'ms / trajectory':>16s}")
    for label, wall, cpu, note in (
            ("per trajectory, networkx GED", t_nx, c_nx, "(the baseline)"),
            ("per trajectory, the reward's GED", t_base, c_base, "(batching alone)"),
            ("batched (GlobalRagReward)", t_batch, c_batch, "(a first step, cold caches)"),
            ("batched, a later step", t_later, c_later, "(new trajectories, warm caches)")):
        print(f"{label:34s} {wall:8.3f} {cpu:8.3f} {1000 * wall / n:16.3f}   {note}")
    print(f"speed-up, wall (CPU): against the networkx baseline {t_nx / t_batch:.1f}x ({c_nx / c_batch:.1f}x) cold, "
          f"{t_nx / t_later:.1f}x ({c_nx / c_later:.1f}x) at a later step (target >= 10x); against the reward's "
          f"distance per trajectory {t_base / t_batch:.1f}x ({c_base / c_batch:.1f}x) cold, {t_base / t_later:.1f}x "
          f"({c_base / c_later:.1f}x) later; terms agree within {worst:.1e}")


if __name__ == "__main__":
    main()
