"""Benchmark: the full RAG-RL reward against bare SQuAD answer F1, on the same completions, in the same run.

    python bench/bench_rewards.py            # 100,000 completions, best of 5 interleaved runs per chunk
    python bench/bench_rewards.py --n 20000 --repeat 1

Completions are generated from the real questions, answers and passages in ../shared/data (seeded): well-formed
answers (right, aliased, wrong, yes/no), citations of gold and distractor passages (labels with commas included),
and every kind of format error the parser reports. The full reward (:class:`RagRlReward`, called as TRL does with
``completions``, ``answers``, ``gold_labels`` and ``passages``) parses each completion, scores EM and F1 over the
aliases, scores citations and the format. The baselines compute only the official SQuAD v1.1 F1 (``Counter``
based, max over the aliases): (a) on the answer string each completion contains (the F1 alone, given an already
extracted answer), (b) on the whole completion text (what a reward with no parser would compute on the pair).
The target is a ratio of at most 3 against (a).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the official SQuAD code, transcribed once in tests/support/oracles/official_eval.py

from support.oracles.official_eval import ref_metric_max_over_ground_truths as metric_max_over_ground_truths  # noqa: E402
from support.oracles.official_eval import squad_f1_score  # noqa: E402

from rag_curriculum import load_examples  # noqa: E402
from rag_curriculum.prompts import unique_labels  # noqa: E402
from rag_curriculum.rewards import RagRlReward  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SOURCES = [
    ("musique", DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"),
    ("hotpotqa", DATA / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"),
    ("2wikimultihopqa", DATA / "2wikimultihopqa" / "train.sample500.json"),
]


# --- completions ----------------------------------------------------------------------------------------------
def make_rows():
    rows = []
    for name, path in SOURCES:
        for ex in load_examples(name, path):
            labels = unique_labels([d.title for d in ex.documents])
            passages = [{"label": lb, "title": d.title, "text": d.text, "is_gold": d.is_gold}
                        for lb, d in zip(labels, ex.documents, strict=True)]
            rows.append({"answers": list(ex.answers), "passages": passages,
                         "gold_labels": [p["label"] for p in passages if p["is_gold"]]})
    return rows


def make_completion(rng: random.Random, row: dict) -> tuple[str, str]:
    passages = row["passages"]
    sentences = [s for p in rng.sample(passages, min(3, len(passages))) for s in p["text"].split(". ")[:3]]
    reasoning = ". ".join(sentences)[: rng.randint(200, 1500)]
    kind = rng.random()
    answer = rng.choice(row["answers"]) if kind < 0.5 else rng.choice(
        ["no", "yes", "1952", "the United States", rng.choice(passages)["title"]])
    cited = list(row["gold_labels"])
    if rng.random() < 0.4:
        cited.append(rng.choice(passages)["label"])
    if rng.random() < 0.3 and len(cited) > 1:
        cited.pop(0)
    body = f"Final answer: {answer}\nSupporting passages: {', '.join(cited)}"
    text = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{body}\n</answer>"
    fault = rng.random()
    if fault < 0.05:
        text = text[: rng.randint(50, len(text) - 1)]  # truncated
    elif fault < 0.08:
        text = "Sure! " + text
    elif fault < 0.10:
        text = text.replace("</reasoning>", "\u8bf4\u660e</reasoning>")  # code-switching
    elif fault < 0.12:
        text = f"{reasoning}\n{body}"  # no tags
    elif fault < 0.14:
        text = text.replace("Final answer:", "Answer:")
    return text, answer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="completions to score")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each (interleaved); the best is reported")
    ap.add_argument("--chunk", type=int, default=5_000, help="completions per timed chunk")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    rows = make_rows()
    picked = [rows[rng.randrange(len(rows))] for _ in range(args.n)]
    made = [make_completion(rng, r) for r in picked]
    completions = [c for c, _ in made]
    predictions = [a for _, a in made]
    answers = [r["answers"] for r in picked]
    gold_labels = [r["gold_labels"] for r in picked]
    passages = [r["passages"] for r in picked]
    reward = RagRlReward()

    def run_reward(lo, hi):
        return reward(completions=completions[lo:hi], answers=answers[lo:hi], gold_labels=gold_labels[lo:hi],
                      passages=passages[lo:hi])

    def run_f1_answer(lo, hi):
        return [metric_max_over_ground_truths(squad_f1_score, p, a)
                for p, a in zip(predictions[lo:hi], answers[lo:hi], strict=True)]

    def run_f1_completion(lo, hi):
        return [metric_max_over_ground_truths(squad_f1_score, c, a)
                for c, a in zip(completions[lo:hi], answers[lo:hi], strict=True)]

    # CPU time of this process, chunk by chunk, interleaved and repeated, keeping the best time of every
    # (contender, chunk): other processes on a shared machine then hit every contender alike.
    runs = {"reward": run_reward, "answer": run_f1_answer, "completion": run_f1_completion}
    chunks = [(lo, min(lo + args.chunk, args.n)) for lo in range(0, args.n, args.chunk)]
    best = {(name, c): float("inf") for name in runs for c in chunks}
    for _ in range(args.repeat):
        for c in chunks:
            for name, fn in runs.items():
                t0 = time.process_time()
                fn(*c)
                best[name, c] = min(best[name, c], time.process_time() - t0)
    t_reward, t_answer, t_completion = (sum(best[name, c] for c in chunks) for name in runs)
    mean_chars = sum(map(len, completions)) / len(completions)
    totals = run_reward(0, args.n)
    valid = sum(b.format_valid for b in reward.components(completions, answers, gold_labels, passages))

    print(f"{args.n} completions (mean {mean_chars:.0f} chars, {valid / args.n:.0%} well-formed), "
          f"CPU seconds, best of {args.repeat} interleaved runs per chunk of {args.chunk}, "
          f"Python {sys.version.split()[0]}")
    print(f"{'':44s} {'CPU s':>8s} {'completions/s':>14s} {'reward/this':>11s}")
    for name, t in [("full RAG-RL reward (RagRlReward, TRL call)", t_reward),
                    ("(a) SQuAD F1 on the extracted answer", t_answer),
                    ("(b) SQuAD F1 on the whole completion", t_completion)]:
        print(f"{name:44s} {t:8.3f} {args.n / t:14,.0f} {t_reward / t:11.2f}")
    print(f"ratio full reward / (a): {t_reward / t_answer:.2f} (target <= 3)")
    print(f"mean total reward {sum(totals) / len(totals):.3f}")


if __name__ == "__main__":
    main()
