"""Benchmark: VERITAS's deterministic terms per trajectory against Search-R1's exact-match reward, on the same
trajectories, in the same run.

    python bench/bench_veritas.py            # 20,000 trajectories, best of 5 interleaved runs per chunk
    python bench/bench_veritas.py --n 5000 --repeat 3

Trajectories are made from the real MuSiQue questions, answers and paragraphs in ../shared/data (seeded), in
Search-R1's layout as the toolkit's rollout writes them (its ``trajectory`` record with the model's and the
environment's segments): zero to three searches, each answered by three paragraphs in an ``<information>`` block,
thinks that quote the retrieved text or not, answers right or wrong, and malformed turns (an unclosed think, a
missing think). Contenders, called as TRL calls a reward (``completions``, ``answers``, ``trajectory``):

* **VERITAS deterministic terms**: the trajectory split into turns and its (think, search) and (information, think)
  pairs extracted (what the judge is sent), Think-Answer by regex in the latest think, EM: ``VeritasReward``
  without a judge plus ``trajectory_pairs``;
* **baseline**: ``search-em``, Search-R1's exact match of the last answer (the reward the paper adds to).

The target is under 1 ms per trajectory for the VERITAS terms.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rag_curriculum.grammar import information_block  # noqa: E402
from rag_curriculum.methods.search_r1 import SearchEmReward  # noqa: E402
from rag_curriculum.methods.veritas._reward import VeritasReward, trajectory_pairs  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"


def make_rows() -> list[dict]:
    rows = []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        rows.append(
            {
                "question": r["question"],
                "answers": [r["answer"], *r.get("answer_aliases", [])],
                "paragraphs": [(p["title"], p["paragraph_text"]) for p in r["paragraphs"]],
            }
        )
    return rows


def make_trajectory(rng: random.Random, row: dict) -> dict:
    segs: list[dict] = []
    answer = rng.choice(row["answers"]) if rng.random() < 0.5 else rng.choice(row["paragraphs"])[0]
    last_info = ""
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
        think = f"<think>I need to know more about {row['question'][: rng.randint(20, 80)]}</think>"
        if rng.random() < 0.05:
            think = think.replace("</think>", "")  # an unclosed think
        if last_info and rng.random() < 0.6:
            think = f"<think>The passage says {last_info[: rng.randint(40, 300)]}. Next.</think>"
        elif last_info and rng.random() < 0.1:
            think = ""  # no think after the information
        query = rng.choice(row["paragraphs"])[0]
        segs.append({"source": "model", "text": f"{think}\n<search> {query} </search>"})
        shown = rng.sample(row["paragraphs"], 3)
        block = information_block(shown)
        segs.append({"source": "env", "text": block})
        last_info = shown[0][1]
    if rng.random() < 0.7:
        final = f"<think>So the answer is {answer}.</think>"
    else:
        final = f"<think>{last_info[:200]}</think>"
    segs.append({"source": "model", "text": f"{final}\n<answer> {answer} </answer>"})
    return {"answer": answer, "segments": segs, "searches": [], "errors": []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="trajectories to score")
    ap.add_argument(
        "--repeat", type=int, default=5, help="timed runs of each (interleaved); the best is reported"
    )
    ap.add_argument("--chunk", type=int, default=1_000, help="trajectories per timed chunk")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    rows = make_rows()
    picked = [rows[rng.randrange(len(rows))] for _ in range(args.n)]
    trajs = [make_trajectory(rng, r) for r in picked]
    texts = ["".join(s["text"] for s in t["segments"]) for t in trajs]
    answers = [r["answers"] for r in picked]
    veritas = VeritasReward(weights={"info_think": 0.0}, log_components=False)
    em = SearchEmReward(log_components=False)

    def run_veritas(lo, hi):
        for t, tr in zip(texts[lo:hi], trajs[lo:hi], strict=True):
            trajectory_pairs(t, tr)
        return veritas(texts[lo:hi], answers[lo:hi], trajectory=trajs[lo:hi])

    def run_em(lo, hi):
        return em(texts[lo:hi], answers[lo:hi], trajectory=trajs[lo:hi])

    runs = {"veritas": run_veritas, "em": run_em}
    chunks = [(lo, min(lo + args.chunk, args.n)) for lo in range(0, args.n, args.chunk)]
    best = {(name, c): float("inf") for name in runs for c in chunks}
    for _ in range(args.repeat):  # CPU time, interleaved chunk by chunk, best per (contender, chunk)
        for c in chunks:
            for name, fn in runs.items():
                t0 = time.process_time()
                fn(*c)
                best[name, c] = min(best[name, c], time.process_time() - t0)
    t_v, t_em = (sum(best[name, c] for c in chunks) for name in runs)
    parts = veritas.components(texts, answers, trajectory=trajs)
    pairs = sum(len(trajectory_pairs(t, tr)) for t, tr in zip(texts, trajs, strict=True))
    chars = sum(map(len, texts)) / len(texts)
    print(
        f"{args.n} trajectories (mean {chars:.0f} chars, {pairs / args.n:.2f} judge pairs each, "
        f"{sum(b.no_search for b in parts) / args.n:.0%} without a search), CPU seconds, best of {args.repeat} "
        f"interleaved runs per chunk of {args.chunk}, Python {sys.version.split()[0]}"
    )
    print(f"{'':52s} {'CPU s':>8s} {'ms / traj':>10s} {'traj / s':>10s}")
    for name, t in [
        ("VERITAS deterministic terms (pairs, Think-Answer, EM)", t_v),
        ("baseline: search-em (Search-R1's EM)", t_em),
    ]:
        print(f"{name:52s} {t:8.3f} {1000 * t / args.n:10.4f} {args.n / t:10,.0f}")
    print(
        f"ratio VERITAS / search-em: {t_v / t_em:.2f}; VERITAS {1000 * t_v / args.n:.4f} ms per trajectory "
        f"(target < 1 ms)"
    )
    print(
        f"means: EM {sum(b.em for b in parts) / args.n:.3f}, Think-Answer "
        f"{sum(b.think_answer for b in parts) / args.n:.3f}, total {sum(b.total for b in parts) / args.n:.3f}"
    )


if __name__ == "__main__":
    main()
