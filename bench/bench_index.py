"""The BM25 index on a HotpotQA-train-sized input, against bm25s alone in the same run; and a BM25-distractor build
against `json.load` of its input.

The input: the shared HotpotQA train sample (100 questions, ~1,000 paragraphs) replicated to ``--questions`` (default
90,447, the official train size: ~900k paragraphs before deduplication). Replica ``r`` belongs to group ``g = r // 2``;
in group ``g > 0`` a word of a paragraph, title or question is suffixed with ``g`` when ``crc32(word) + g`` is
divisible by 3, so about half of the ~900k paragraphs are distinct (pairs of replicas share theirs, as questions
share paragraphs in the real file) and the vocabulary and posting lists grow with the file as real text does. Made
once, deterministically, under the temp folder.

(a) the toolkit: ``curriculum index`` (rag_retriever.build_index: read with the HotpotQA loader, deduplicate,
    tokenize, index, rank every question to ``--depth``, save with the manifest);
(b) bm25s alone, the same work written directly: ``json.load``, deduplicate with a dict, the same bm25s Tokenizer,
    ``BM25.index``, ``retrieve(k=depth, n_threads)``, ``BM25.save`` and ``numpy.save`` of the rankings.
Both in fresh processes, alternated; wall time and peak RSS (``resource.getrusage``). Overhead = a / b - 1 (target
<= 10%). Then a min-max ``--distractors bm25`` build of every question with that index against ``json.load`` of the
input (target <= 3x; bench/bench_build.py measures the provided build the same way).

    python bench/bench_index.py [--questions 90447] [--depth 100] [--repeats 1] [--backend auto]
    python bench/bench_index.py --index DIR [--repeats 1]     # the build comparison alone
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
import zlib
from pathlib import Path

from _common import HOTPOT_SAMPLE, HOTPOT_TRAIN_RECORDS, compare

_WORD = re.compile(r"\w+|\W+")


def _perturb(text: str, g: int, memo: dict[str, int]) -> str:
    if g == 0:
        return text
    out = []
    for piece in _WORD.findall(text):
        h = memo.get(piece)
        if h is None:
            h = memo[piece] = zlib.crc32(piece.encode()) if piece[0].isalnum() else -1
        out.append(f"{piece}{g}" if h >= 0 and (h + g) % 3 == 0 else piece)
    return "".join(out)


def synth_file(questions: int) -> Path:
    path = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-index-hotpot-{questions}.json"
    if path.exists():
        return path
    sample = json.loads(HOTPOT_SAMPLE.read_text(encoding="utf-8"))
    memo: dict[str, int] = {}
    cache: dict[tuple[int, int], dict] = {}
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("[")
        for i in range(questions):
            s, g = i % len(sample), (i // len(sample)) // 2
            rec = cache.get((s, g))
            if rec is None:
                if len(cache) > 4 * len(sample):
                    cache.clear()
                base = sample[s]
                titles = {t: _perturb(t, g, memo) for t, _ in base["context"]}
                rec = cache[(s, g)] = {
                    **base,
                    "question": _perturb(base["question"], g, memo),
                    "context": [[titles[t], [_perturb(x, g, memo) for x in sents]] for t, sents in base["context"]],
                    "supporting_facts": [[titles.get(t, t), k] for t, k in base["supporting_facts"]],
                }
            out = dict(rec)
            out["_id"] = f"{rec['_id']}-{i:06d}"
            if i:
                f.write(", ")
            json.dump(out, f, ensure_ascii=False)
        f.write("]")
    os.replace(tmp, path)
    return path


def corpus_file(source: Path, passages: int) -> Path:
    """``passages`` passages: the distinct paragraphs of ``source`` (a :func:`synth_file`), group after group, each
    group's words perturbed with its own number (1000 + group, beyond the input's groups), JSONL of title and text;
    made once under the temp folder (5,233,329 passages, BEIR-HotpotQA's size: about 3.5 GB)."""
    import time

    path = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-wiki-{passages}.jsonl"
    if path.exists():
        return path
    seen: set[tuple[str, str]] = set()
    paragraphs: list[tuple[str, str]] = []
    for rec in json.loads(source.read_text(encoding="utf-8")):
        for title, sents in rec["context"]:
            key = (title, "".join(sents))
            if key not in seen:
                seen.add(key)
                paragraphs.append(key)
    del seen
    memo: dict[str, int] = {}
    tmp = path.with_suffix(".tmp")
    t0, n, group = time.perf_counter(), 0, 0
    with open(tmp, "w", encoding="utf-8") as f:
        while n < passages:
            g = 1000 + group
            for title, text in paragraphs:
                if n == passages:
                    break
                f.write(json.dumps({"title": _perturb(title, g, memo), "text": _perturb(text, g, memo)},
                                   ensure_ascii=False) + "\n")
                n += 1
            group += 1
            print(f"corpus: {n:,} passages ({group} groups of {len(paragraphs):,}), {time.perf_counter() - t0:.0f} s",
                  flush=True)
    os.replace(tmp, path)
    return path


TOOLKIT = """
from rag_retriever import IndexConfig, build_index
m = build_index(IndexConfig(dataset="hotpotqa", input={path!r}, out={out!r}, depth={depth}, backend={backend!r},
                            overwrite=True), command="bench")
open({out!r} + ".seconds.json", "w").write(json.dumps(m["seconds"]))
"""

ALONE = """
import re, numpy as np, bm25s, os
from bm25s.tokenization import Tokenizer
data = json.load(open({path!r}, encoding="utf-8"))
seen, titles, texts, questions = {{}}, [], [], []
for rec in data:
    questions.append(rec["question"])
    for title, sents in rec["context"]:
        key = (title, "".join(sents))
        if key not in seen:
            seen[key] = len(titles)
            titles.append(title)
            texts.append(key[1])
backend = {backend!r}  # bm25s's auto: numba when installed, as the toolkit's
tok = Tokenizer(lower=True, splitter=re.compile(r"(?u)\\b\\w\\w+\\b").findall, stopwords="en", stemmer=None)
ids = tok.tokenize([f"{{a}} {{x}}" for a, x in zip(titles, texts)], update_vocab=True, return_as="ids",
                   show_progress=False)
vocab = tok.get_vocab_dict()
r = bm25s.BM25(k1=1.5, b=0.75, method="lucene", backend=backend)
r.index((ids, vocab), show_progress=False)
del ids
q = tok.tokenize(questions, update_vocab=False, return_as="ids", show_progress=False)
docs, scores = r.retrieve(q, k=min({depth}, len(titles)), n_threads=os.cpu_count(), show_progress=False)
os.makedirs({out!r}, exist_ok=True)
r.save({out!r} + "/bm25", show_progress=False)
np.save({out!r} + "/ids.npy", docs.astype(np.int32)); np.save({out!r} + "/scores.npy", scores)
"""

BUILD = """
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
cfg = BuildConfig(sources=[SourceSpec("hotpotqa", {path!r}, None)], schedule="min-max", distractors="bm25",
                  index={index!r}, out={out!r}, overwrite=True)
res = build_curriculum(cfg, command="bench")
assert res.rows > 0
print(json.dumps({{"excluded": res.manifest["distractors"]["excluded"]}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=HOTPOT_TRAIN_RECORDS, help="questions in the input")
    ap.add_argument("--depth", type=int, default=100, help="passages ranked per question")
    ap.add_argument("--repeats", type=int, default=1, help="alternated runs of each side (median)")
    ap.add_argument("--backend", default="auto", choices=("auto", "numpy", "numba"))
    ap.add_argument("--skip-build", action="store_true", help="only the index comparison")
    ap.add_argument("--index", metavar="DIR", help="only the build comparison, with this index of the same input "
                    "(made by an earlier run of curriculum index on it)")
    args = ap.parse_args()
    path = synth_file(args.questions)
    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-index-"))
    try:
        if args.index:
            _build_only(path, args.index, work, args.repeats)
            return
        ix = str(work / "index")
        fmt = {"path": str(path), "depth": args.depth, "backend": args.backend}
        r = compare("bm25s alone", ALONE.format(out=str(work / "alone"), **fmt),
                    "toolkit index", TOOLKIT.format(out=ix, **fmt), repeats=args.repeats)
        facts = json.loads((Path(ix) / "manifest.json").read_text())
        a, t = r["bm25s alone"], r["toolkit index"]
        n_p, n_q = facts["passages"], facts["questions"]
        src = facts["sources"][0]
        print(f"input: {path} ({n_q:,} questions, {src['paragraphs']:,} paragraphs, {n_p:,} distinct; "
              f"{path.stat().st_size / 1e6:,.0f} MB); vocabulary {facts['vocab_size']:,}; depth {facts['depth']}; "
              f"backend {facts['backend']}; {os.cpu_count()} CPUs")
        for name, x in (("bm25s alone", a), ("toolkit index", t)):
            print(f"{name:14s} wall {x['wall']:7.2f} s   peak {x['peak_mb']:8,.0f} MB   "
                  f"{n_p / x['wall']:8,.0f} passages/s (end to end)   {n_q / x['wall']:8,.0f} questions/s (end to end)"
                  f"   CPU {x.get('cpu', 0):7.1f} s   stolen by the hypervisor {x.get('steal', 0):.0%}")
        sec = json.loads(Path(ix + ".seconds.json").read_text())
        print(f"toolkit phases: read {sec['read']} s, tokenize+index {sec['index']} s "
              f"({n_p / max(sec['index'], 1e-9):,.0f} passages/s), waiting for the passage-side worker "
              f"{sec.get('wait', 0)} s, rank {sec['rank']} s ({n_q / max(sec['rank'], 1e-9):,.0f} queries/s)")
        print(f"overhead: {t['wall'] / a['wall'] - 1:+.1%} (target <= +10%)")
        if not args.skip_build:
            _build_only(path, ix, work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build_only(path: Path, ix: str, work: Path, repeats: int) -> None:
    facts = json.loads((Path(ix) / "manifest.json").read_text())
    if facts["sources"][0].get("input") != path.name:
        raise SystemExit(f"{ix} indexes {facts['sources'][0].get('input')}, not {path.name}")
    baseline = f"data = json.load(open({str(path)!r}, encoding='utf-8'))\nn = len(data)"
    r = compare("json.load", baseline, "bm25 build",
                BUILD.format(path=str(path), index=ix, out=str(work / "build")), repeats=repeats)
    b, o = r["json.load"], r["bm25 build"]
    man = json.loads((work / "build" / "manifest.json").read_text())
    print(f"json.load                 wall {b['wall']:6.2f} s   peak {b['peak_mb']:8,.0f} MB   "
          f"CPU {b.get('cpu', 0):6.1f} s   stolen {b.get('steal', 0):.0%}")
    print(f"build min-max, bm25 (all) wall {o['wall']:6.2f} s   peak {o['peak_mb']:8,.0f} MB   "
          f"CPU {o.get('cpu', 0):6.1f} s   ({facts['questions'] / o['wall']:,.0f} rows/s; skipped "
          f"{man['distractors']['excluded']}; stolen {o.get('steal', 0):.0%})")
    print(f"ratio: {o['wall'] / b['wall']:.2f}x json.load (target <= 3)")


if __name__ == "__main__":
    main()
