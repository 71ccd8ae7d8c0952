"""pyserini's answers on a corpus, written down as an oracle: run this with a Python that has pyserini (made by
``scripts/setup.sh pyserini``; Java 11+ on PATH or in JAVA_HOME).

    .venv-pyserini/bin/python bench/pyserini_oracle.py --corpus CORPUS.jsonl --queries QUERIES.json --out DIR
        [--k 10] [--no-analyze] [--no-norms]

``CORPUS.jsonl``: Search-R1's layout, one ``{"id", "contents"}`` a line. ``QUERIES.json``: a JSON list of
``{"id", "query"}`` objects (or of strings: ids are then their positions). ``DIR`` gets:

- ``index/``: the Lucene index, built exactly as Search-R1's ``search_r1/search/index_builder.py`` builds it:
  ``python -m pyserini.index.lucene --collection JsonCollection --input D --index DIR/index --generator
  DefaultLuceneDocumentGenerator --threads 1`` (no ``--storeRaw``: Search-R1's builder stores no raw document; its
  server then reads the passages from the corpus file by docid), ``D`` a folder holding only the corpus (a link).
- ``run.jsonl``: one line per query, in the queries' order: ``{"id", "query", "tokens", "hits": [[docid, score,
  lucene_score], ...]}``. ``tokens``: the query analysed by pyserini's default analyzer; ``hits``: what
  ``LuceneSearcher(index).search(query, k)`` returns, best first (docid and ``score``, which Anserini rounds to
  1e-4 and nudges down by 1e-6 per tie, see below), with ``lucene_score``, the same hit's raw Lucene BM25 score
  (the same query searched through Lucene's ``IndexSearcher`` with the same similarity and sort, before Anserini's
  rounding). A query with no indexed token gets no hit.
- ``passages.jsonl`` (unless ``--no-analyze``): one line per corpus line, in file order: ``{"id", "tokens",
  "norm"}``. ``tokens``: ``Analyzer(get_lucene_analyzer()).analyze(contents)`` (the field Lucene indexes is the
  whole ``contents``, title line included); ``norm`` (unless ``--no-norms``): the document's one-byte length norm
  as Lucene stored it (``SmallFloat.intToByte4`` of its token count, read from the index through pyjnius), -1 if
  the document is not in the index (an empty ``contents`` is skipped by Anserini).
- ``stats.json``: versions (pyserini, Lucene, Java), the index command line, build seconds, whether raw documents
  are stored (``raw_stored``: ``searcher.doc(0).raw() is not None``, the test Search-R1's server makes), the field's
  collection statistics (``docCount``, ``sumTotalTermFreq``, ``sumDocFreq``, ``maxDoc``; ``avgdl`` as Lucene's
  BM25 computes it: ``(float) (sumTotalTermFreq / (double) docCount)``), the segment count, k1, b.

How pyserini 0.25.0 searches (Anserini 0.25.0's ``SimpleSearcher``, which ``LuceneSearcher`` wraps): the query is
analysed by ``DefaultEnglishAnalyzer`` (Lucene's StandardTokenizer, EnglishPossessiveFilter, LowerCaseFilter,
StopFilter with Lucene's 33 English stop words, PorterStemFilter); each distinct token becomes a ``TermQuery`` on
``contents`` boosted by its count in the query (``BagOfWordsQueryGenerator``), all SHOULD clauses of one
``BooleanQuery``; scored by ``BM25Similarity(0.9, 0.4)``; sorted by ``Sort(SortField.FIELD_SCORE, SortField("id",
STRING_VAL))``: score descending, ties by the collection docid as a string, ascending (UTF-8 byte order, so "10"
comes before "9"). Then ``ScoreTiesAdjusterReranker`` rounds every score to 1e-4 and subtracts 1e-6 for each hit
in a run of hits whose rounded scores are within 1e-4 of the previous one, without reordering.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def build(corpus: Path, out: Path) -> dict:
    """The Lucene index of ``corpus`` in ``out/index``, as Search-R1's index builder runs pyserini."""
    index = out / "index"
    docs = out / "input"
    docs.mkdir(parents=True, exist_ok=True)
    link = docs / "corpus.jsonl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(corpus.resolve())
    cmd = [sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input", str(docs),
           "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator", "--threads", "1"]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if r.returncode or not index.is_dir():
        sys.exit(f"pyserini's index build failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return {"command": ["python", *cmd[1:]], "build_seconds": round(seconds, 2),
            "index_bytes": sum(p.stat().st_size for p in index.rglob("*") if p.is_file())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-analyze", action="store_true", help="do not write passages.jsonl")
    ap.add_argument("--no-norms", action="store_true", help="do not read the norms from the index")
    ap.add_argument("--rebuild", action="store_true", help="build the index again even if DIR/index exists")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    facts: dict = {}
    if args.rebuild or not (out / "index").is_dir():
        facts.update(build(args.corpus, out))
    elif (out / "stats.json").exists():
        old = json.loads((out / "stats.json").read_text())
        facts.update({k: old[k] for k in ("command", "build_seconds", "index_bytes") if k in old})

    from importlib.metadata import version

    from pyserini.analysis import Analyzer, get_lucene_analyzer
    from pyserini.pyclass import autoclass  # (jnius with pyserini's jar on the class path)
    from pyserini.search.lucene import LuceneSearcher

    jpaths = autoclass("java.nio.file.Paths")
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
        autoclass("org.apache.lucene.store.FSDirectory").open(jpaths.get(str(out / "index"))))
    isearcher = autoclass("org.apache.lucene.search.IndexSearcher")(
        reader, signature="(Lorg/apache/lucene/index/IndexReader;)V")
    isearcher.setSimilarity(autoclass("org.apache.lucene.search.similarities.BM25Similarity")(0.9, 0.4))
    sort_field = autoclass("org.apache.lucene.search.SortField")
    string_val = autoclass("org.apache.lucene.search.SortField$Type").STRING_VAL
    sort = autoclass("org.apache.lucene.search.Sort")(sort_field.FIELD_SCORE, sort_field("id", string_val))
    generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
    jstats = isearcher.collectionStatistics("contents")
    stats = {"pyserini": version("pyserini"), "lucene": autoclass("org.apache.lucene.util.Version").LATEST.toString(),
             "java": autoclass("java.lang.System").getProperty("java.version"), **facts,
             "docCount": jstats.docCount(), "sumTotalTermFreq": jstats.sumTotalTermFreq(),
             "sumDocFreq": jstats.sumDocFreq(), "maxDoc": reader.maxDoc(), "segments": reader.leaves().size(),
             "k1": 0.9, "b": 0.4}
    stats["avgdl"] = float(__import__("numpy").float32(stats["sumTotalTermFreq"] / stats["docCount"]))
    analyzer = Analyzer(get_lucene_analyzer())
    jan = get_lucene_analyzer()
    searcher = LuceneSearcher(str(out / "index"))
    # Search-R1's server asks this to decide where passages come from: None = no raw documents stored
    stats["raw_stored"] = searcher.doc(0).raw() is not None if reader.maxDoc() else False

    raw = json.loads(args.queries.read_text(encoding="utf-8"))
    queries = [(str(i), q) if isinstance(q, str) else (str(q["id"]), q["query"]) for i, q in enumerate(raw)]
    t = time.perf_counter()
    with open(out / "run.jsonl.tmp", "w", encoding="utf-8") as f:
        for qid, q in queries:
            hits = searcher.search(q, k=args.k)
            top = isearcher.search(generator.buildQuery("contents", jan, q), args.k, sort, True)
            docs = top.scoreDocs
            lucene = [(isearcher.storedFields().document(d.doc).get("id"), d.score) for d in docs]
            if [h.docid for h in hits] != [d for d, _ in lucene]:  # the same search: it cannot differ
                sys.exit(f"query {qid}: pyserini's hits and Lucene's differ: {[h.docid for h in hits]} {lucene}")
            f.write(json.dumps({"id": qid, "query": q, "tokens": analyzer.analyze(q),
                                "hits": [[h.docid, h.score, s] for h, (_, s) in zip(hits, lucene, strict=True)]},
                               ensure_ascii=False) + "\n")
    os.replace(out / "run.jsonl.tmp", out / "run.jsonl")
    stats["queries"] = len(queries)
    stats["search_seconds"] = round(time.perf_counter() - t, 2)
    print(f"{len(queries):,} queries searched in {stats['search_seconds']} s", flush=True)

    if not args.no_analyze:
        norms: dict[str, int] = {}
        if not args.no_norms:
            t = time.perf_counter()
            leaves = reader.leaves()
            for i in range(leaves.size()):
                ctx = leaves.get(i)
                leaf = ctx.reader()
                ids = leaf.getBinaryDocValues("id")
                nv = leaf.getNormValues("contents")
                while True:
                    doc = ids.nextDoc()
                    if doc >= leaf.maxDoc():  # NO_MORE_DOCS
                        break
                    docid = ids.binaryValue().utf8ToString()
                    if nv.advanceExact(doc):
                        norms[docid] = nv.longValue() & 0xFF
            stats["norms_seconds"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        n = 0
        with open(args.corpus, encoding="utf-8") as src, open(out / "passages.jsonl.tmp", "w", encoding="utf-8") as f:
            for line in src:
                if not line.strip():
                    continue
                rec = json.loads(line)
                did = str(rec["id"])
                f.write(json.dumps({"id": did, "tokens": analyzer.analyze(rec["contents"]),
                                    "norm": norms.get(did, -1) if not args.no_norms else None},
                                   ensure_ascii=False) + "\n")
                n += 1
                if n % 50_000 == 0:
                    print(f"analysed {n:,} passages, {time.perf_counter() - t:.0f} s", flush=True)
        os.replace(out / "passages.jsonl.tmp", out / "passages.jsonl")
        stats["passages"] = n
        stats["analyze_seconds"] = round(time.perf_counter() - t, 2)
    (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
