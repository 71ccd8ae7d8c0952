"""Benchmark: the CRAFT reward against the RAG-RL reward on the same questions, in the same run; and the judge's
disk cache against the judge call it saves.

    python bench/bench_craft.py              # 20,000 completions, best of 3
    python bench/bench_craft.py --n 5000 --repeat 1

Completions are made from the real questions, answers and passages in ../shared/data (seeded), the same content in
both formats: a plan, declared documents (gold, gold and distractors, distractors only), a reasoning that cites
them, a right, partial or wrong answer, and a quarter broken (Table 12's errors). The CRAFT reward (``craft``,
craft-v1: format gate, answer SoftF1, evidence F1, called as TRL does) is timed against the RAG-RL reward
(``rag-rl``) on the RAG-RL rendering of the same completions; the ratio is CRAFT / RAG-RL time.

The judge part audits 200 traces with a scripted judge that answers after ``--judge-latency`` seconds per prompt
(a stand-in for a served LLM), cold (every verdict generated and written to the disk cache), then again with a
fresh judge on the same cache (every verdict read back); the ratio is warm / cold time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rag_curriculum import load_examples  # noqa: E402
from rag_curriculum.prompts import unique_labels  # noqa: E402
from rag_curriculum.rewards import get_reward  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SOURCES = [("musique", DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"),
           ("hotpotqa", DATA / "hotpotqa" / "hub_distractor_validation.sample300.jsonl")]


def make(n: int, seed: int = 0):
    rng = random.Random(seed)
    examples = [ex for name, path in SOURCES for ex in load_examples(name, str(path))]
    craft, rag, cols_c, cols_r = [], [], {"answers": [], "gold_labels": []}, {"answers": [], "gold_labels": [],
                                                                              "passages": []}
    for _ in range(n):
        ex = rng.choice(examples)
        titles = [d.title for d in ex.documents]
        labels = unique_labels(titles)
        numbers = [str(i) for i in range(1, len(titles) + 1)]
        gold = [k for k, d in enumerate(ex.documents) if d.is_gold]
        other = [k for k, d in enumerate(ex.documents) if not d.is_gold] or gold
        pick = rng.random()
        declared = gold if pick < 0.5 else gold[:1] + other[:1] if pick < 0.8 else other[:2]
        answer = rng.choice([ex.answers[0], ex.answers[0].split()[0], "unknown"])
        reason = " ".join(f"Document [{numbers[k]}] says so." for k in declared)
        c = (f"<plan>\nSubquestion 1: ...\n</plan>\n<gold_docs>\n[{', '.join(numbers[k] for k in declared)}]\n"
             f"</gold_docs>\n<reason>\n{reason}\n</reason>\n<answer>\n{answer}\n</answer>")
        r = (f"<reasoning>\n{reason}\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: "
             f"{', '.join(labels[k] for k in declared)}\n</answer>")
        if rng.random() < 0.25:  # broken
            c, r = c[: -len("</answer>")], r[: -len("</answer>")]
        craft.append(c)
        rag.append(r)
        cols_c["answers"].append(ex.answers)
        cols_c["gold_labels"].append([numbers[k] for k in gold])
        cols_r["answers"].append(ex.answers)
        cols_r["gold_labels"].append([labels[k] for k in gold])
        cols_r["passages"].append([{"label": lb} for lb in labels])
    return craft, rag, cols_c, cols_r


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--judge-latency", type=float, default=0.002)
    args = ap.parse_args()
    craft, rag, cols_c, cols_r = make(args.n)
    c_reward = get_reward("craft", output_format="craft-v1", log_components=False)
    r_reward = get_reward("rag-rl", log_components=False)
    tc = best(lambda: c_reward(craft, **cols_c), args.repeat)
    tr = best(lambda: r_reward(rag, **cols_r), args.repeat)
    print(f"rewards on {args.n} completions: craft {tc:.3f}s ({args.n / tc:,.0f}/s), rag-rl {tr:.3f}s "
          f"({args.n / tr:,.0f}/s); ratio craft / rag-rl = {tc / tr:.2f}")

    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.methods.craft._judge import CraftJudge

    def judge(messages, n, seed):
        time.sleep(args.judge_latency)
        return [json.dumps({"plan_reason": 1, "citations": 1, "reason_answer": 1, "grounding": 1})] * n

    items = [("q?", [(str(i), f"T{i}", "text " * 40) for i in range(1, 11)], t, "craft-v1") for t in craft[:200]]
    with tempfile.TemporaryDirectory() as cache:
        cold_judge = CraftJudge(backend=ScriptedBackend(script=judge), cache_dir=cache)
        t0 = time.perf_counter()
        cold_judge.audit(items)
        cold = time.perf_counter() - t0
        warm_judge = CraftJudge(backend=ScriptedBackend(script=judge), cache_dir=cache)
        t0 = time.perf_counter()
        verdicts = warm_judge.audit(items)
        warm = time.perf_counter() - t0
        assert warm_judge.calls == 0 and all(v.cached for v in verdicts)
    print(f"judge on {len(items)} traces ({args.judge_latency * 1000:.0f} ms per judge prompt): cold {cold:.3f}s "
          f"({cold_judge.calls} prompts), warm from the disk cache {warm:.3f}s (0 prompts); ratio warm / cold = "
          f"{warm / cold:.3f}")


if __name__ == "__main__":
    main()
