"""Builds that draw passages from a BM25 index, on the real MuSiQue and HotpotQA samples: BM25 and mixed
distractors (never a gold copy, never an answer-containing passage, nested across levels, beyond the dataset's
k, deterministic), the retrieved setting (gold recall), and the commands end to end."""

from __future__ import annotations

import hashlib
import json

import bm25s.stopwords
import pytest
from conftest import HOTPOT_HUB, MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index, load_index
from typer.testing import CliRunner

from rag_curriculum._metrics import normalize_answer
from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.curricula.distractors import BM25Source, MixedSource, distractor_pool, passage_key
from rag_curriculum.errors import ConfigError
from rag_curriculum.loaders import load_examples
from rag_curriculum.shards import read_rows, shard_files


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("idx") / "musique-train"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=60))
    return out


@pytest.fixture(scope="module")
def examples(shared_data):
    return {ex.id: ex for ex in load_examples("musique", MUSIQUE_TRAIN)}


def _build(out, index_dir, distractors="bm25", **kw):
    cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), kw.pop("n", None))], schedule="min-max",
                      distractors=distractors, index=str(index_dir), out=str(out), **kw)
    return build_curriculum(cfg, command="test")


@pytest.fixture(scope="module")
def bm25_build(tmp_path_factory, index_dir):
    out = tmp_path_factory.mktemp("b") / "bm25"
    return _build(out, index_dir, K=24)


def _contains_answer(p, answers):
    """The answers looked for: not yes/no, not only bm25s's English stop words, and no alias under 3 characters."""
    norm = f" {normalize_answer(p['title'] + ' ' + p['text'])} "
    looked = [a for i, a in enumerate(map(normalize_answer, answers)) if a not in ("", "yes", "no")
              and not set(a.split()) <= set(bm25s.stopwords.STOPWORDS_EN) and (i == 0 or len(a) >= 3)]
    return any(f" {a} " in norm for a in looked)


@pytest.mark.slow
def test_bm25_distractors_are_never_gold_copies_nor_answer_bearing(bm25_build, examples):
    rows = read_rows(bm25_build.out)
    assert len(rows) == 100
    seen_bm25 = 0
    for r in rows:
        ex = examples[r["source_id"]]
        gold = {passage_key(d.title, d.text) for d in ex.documents if d.is_gold}
        shown_gold = [p for p in r["passages"] if p["is_gold"]]
        assert sorted((p["title"], p["text"]) for p in shown_gold) == sorted(
            (d.title, d.text) for d in ex.documents if d.is_gold)
        assert all(p["origin"] == "provided" for p in shown_gold)
        for p in r["passages"]:
            if p["is_gold"]:
                continue
            seen_bm25 += 1
            assert p["origin"] == "bm25" and p["bm25_rank"] >= 1
            assert passage_key(p["title"], p["text"]) not in gold
            assert not _contains_answer(p, r["answers"]), (r["id"], p["title"])
        ranks = [p["bm25_rank"] for p in r["passages"] if not p["is_gold"]]
        assert len(set(ranks)) == len(ranks)
    assert seen_bm25 > 500
    excluded = bm25_build.manifest["distractors"]["excluded"]
    assert excluded["gold_copy"] > 0 and excluded["answer"] > 0  # both rules fired on real data


@pytest.mark.slow
def test_the_formula_holds_and_k_is_no_longer_capped_by_the_dataset(bm25_build, examples, index_dir):
    """d = min(max(l + 2 - j, 0), k) with k = the question's ranked passages (60 deep) that are neither gold
    copies nor answer-bearing, counted here from the stored ranking."""
    ix = load_index(index_dir)
    rows = read_rows(bm25_build.out)
    beyond = 0
    for r in rows:
        ex = examples[r["source_id"]]
        gold = {passage_key(d.title, d.text) for d in ex.documents if d.is_gold}
        k = 0
        for pid in ix.stored(ex.id, ex.question).ids:
            title, text = ix.passage(int(pid))
            k += passage_key(title, text) not in gold and not _contains_answer({"title": title, "text": text},
                                                                                 ex.answers)
        want = max(r["level"] + 2 - r["hops"], 0)
        assert r["num_distractors"] == min(want, k)
        assert len(r["passages"]) == r["hops"] + r["num_distractors"]
        beyond += r["num_distractors"] > len(distractor_pool(ex))
    assert beyond > 0  # K=24 asks for more distractors than MuSiQue ships (18) and gets them


def test_distractors_are_nested_across_levels(index_dir, examples):
    for cls in (BM25Source, MixedSource):
        source = cls(load_index(index_dir), seed=3)
        exs = list(examples.values())[:25]
        source.prepare(exs)
        for ex in exs:
            prev: set = set()
            for d in range(0, 26):
                docs = source.select(ex, d)
                now = {(p.title, p.text) for p in docs if not p.is_gold}
                assert prev <= now and len(now) == source.available(ex, d)
                prev = now


def test_mixed_alternates_provided_and_bm25(tmp_path, index_dir):
    res = _build(tmp_path / "mixed", index_dir, distractors="mixed")
    for r in read_rows(res.out):
        origins = sorted(p["origin"] for p in r["passages"] if not p["is_gold"])
        d = r["num_distractors"]
        assert origins.count("provided") == (d + 1) // 2 and origins.count("bm25") == d // 2
    facts = res.manifest["distractors"]
    assert facts["source"] == "mixed" and facts["excluded"]["provided_copy"] > 0
    assert facts["origins"]["distractor:bm25"] > 0 and facts["origins"]["distractor:provided"] > 0


def test_builds_are_byte_identical(tmp_path, index_dir, bm25_build):
    again = _build(tmp_path / "bm25", index_dir, K=24)  # same name: the card names its folder

    def digest(d):
        return [hashlib.sha256(f.read_bytes()).hexdigest() for f in shard_files(d)]

    assert digest(again.out) == digest(bm25_build.out)
    assert (again.out / "README.md").read_text() == (bm25_build.out / "README.md").read_text()


def test_the_index_is_required_and_checked():
    with pytest.raises(ConfigError, match="needs an index") as e:
        BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN))], distractors="bm25").validate()
    assert "curriculum index" in e.value.hint
    with pytest.raises(ConfigError, match="does not apply to --setting ideal"):
        BuildConfig(sources=[SourceSpec("musique")], distractors="bm25", index="x", setting="ideal").validate()
    with pytest.raises(ConfigError, match="--index is read by --distractors bm25") as e:  # not silently ignored
        BuildConfig(sources=[SourceSpec("musique")], index="x").validate()
    assert "drop --index" in e.value.hint


@pytest.mark.slow
def test_retrieved_setting_records_gold_recall(tmp_path_factory, shared_data):
    idx = tmp_path_factory.mktemp("idx") / "hotpot-dev"
    build_index(IndexConfig(dataset="hotpotqa", input=str(HOTPOT_HUB), out=str(idx), depth=20))
    examples = {ex.id: ex for ex in load_examples("hotpotqa", HOTPOT_HUB)}
    res = build_curriculum(BuildConfig(sources=[SourceSpec("hotpotqa", str(HOTPOT_HUB), 120)], setting="retrieved",
                                       index=str(idx), top_k=4, out=str(tmp_path_factory.mktemp("r") / "ret")),
                           command="test")
    rows = read_rows(res.out)
    recalls = []
    for r in rows:
        ex = examples[r["source_id"]]
        gold = {passage_key(d.title, d.text) for d in ex.documents if d.is_gold}
        shown = [passage_key(p["title"], p["text"]) for p in r["passages"]]
        assert len(shown) == 4 and [p["bm25_rank"] for p in r["passages"]] == [1, 2, 3, 4]
        assert [p["is_gold"] for p in r["passages"]] == [k in gold for k in shown]
        assert r["gold_recall"] == pytest.approx(len(gold & set(shown)) / len(gold))
        assert r["hops"] == ex.hops and r["setting"] == "retrieved"
        assert r["num_distractors"] == sum(not p["is_gold"] for p in r["passages"])
        recalls.append(r["gold_recall"])
    gr = res.manifest["distractors"]["gold_recall"]
    assert gr["all"] == recalls.count(1.0) and gr["none"] == recalls.count(0.0) and gr["all"] + gr["none"] < 120
    assert gr["mean"] == pytest.approx(sum(recalls) / len(recalls), abs=1e-4)
    card = (res.out / "README.md").read_text()
    assert "Gold recall@4" in card


@pytest.mark.slow
def test_cli_index_build_inspect_end_to_end(tmp_path, shared_data):
    runner = CliRunner()
    idx = tmp_path / "idx"
    r = runner.invoke(app, ["index", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--out", str(idx),
                            "--depth", "30", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "indexed 1,890 passages" in " ".join(r.output.split())
    out = tmp_path / "cur"
    r = runner.invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--n", "40", "--distractors", "bm25",
                            "--index", str(idx), "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["distractors"] == "bm25" and m["distractors"]["index"]["passages"] == 1890
    r = runner.invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0 and "passage origins" in r.output and "bm25" in r.output
    r = runner.invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--distractors", "bm25",
                            "-o", str(tmp_path / "x"), "--no-progress"])
    assert r.exit_code == 1 and "needs an index" in r.output
    r = runner.invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--distractors", "bm25",
                            "--index", str(tmp_path / "nope"), "-o", str(tmp_path / "x"), "--no-progress"])
    assert r.exit_code == 1 and "no such index directory" in r.output
    r = runner.invoke(app, ["index", "--help"])
    assert r.exit_code == 0 and "--depth" in r.output and "--k1" in r.output


def test_unanswerable_rows_replace_gold_with_the_next_bm25_distractors(tmp_path, index_dir, examples):
    res = _build(tmp_path / "u", index_dir, unanswerable_fraction=0.4)
    rows = read_rows(res.out)
    unanswerable = [r for r in rows if not r["answerable"]]
    assert 20 < len(unanswerable) < 70
    for r in unanswerable:
        ex = examples[r["source_id"]]
        gold = {passage_key(d.title, d.text) for d in ex.documents if d.is_gold}
        assert not any(p["is_gold"] or passage_key(p["title"], p["text"]) in gold for p in r["passages"])
        assert all(p["origin"] == "bm25" for p in r["passages"]) and r["gold_labels"] == []
        want = max(r["level"] + 2 - ex.hops, 0)
        assert len(r["passages"]) == want + ex.hops  # the passage count of its answerable form
    assert res.manifest["unanswerable"]["short_rows"] == 0


def test_the_answer_filter_is_normalize_answer_containment(shared_data):
    """The fast answer test (bytes, one pass) decides as SQuAD normalisation of the passage and the answers does,
    on real HotpotQA passages and answers."""
    import random

    from rag_curriculum.curricula.distractors import _AnswerFilter

    exs = list(load_examples("hotpotqa", HOTPOT_HUB))[:120]
    docs = [d for ex in exs for d in ex.documents]
    hits = 0
    for ex in exs:
        f = _AnswerFilter(ex.answers)
        for d in random.Random(0).sample(docs, 40) + ex.documents:
            ref = _contains_answer({"title": d.title, "text": d.text}, ex.answers)
            assert f(d.title, d.text) == ref, (ex.id, d.title)
            hits += ref
    assert hits > 100


@pytest.mark.parametrize("margin", [0, 6, 100])
def test_the_batched_planner_writes_what_the_one_row_walk_writes(tmp_path, index_dir, bm25_build, monkeypatch,
                                                                  margin):
    """The build's BM25 planning runs over all rows at once (array gold-copy test, answer test over a window of
    each ranking, a row-by-row walk past it); the reference build below walks one row at a time. Margin 0 sends
    most rows past their window, 100 none."""
    import rag_curriculum.curricula.distractors as distractors

    assert distractors.BATCHED_PLAN
    monkeypatch.setattr(distractors, "PLAN_MARGIN", margin)
    batched = _build(tmp_path / "bm25", index_dir, K=24)
    assert [f.read_bytes() for f in shard_files(batched.out)] == [f.read_bytes() for f in shard_files(bm25_build.out)]
    assert batched.manifest["distractors"] == bm25_build.manifest["distractors"]
    monkeypatch.setattr(distractors, "BATCHED_PLAN", False)
    again = _build(tmp_path / "bm25-one-by-one", index_dir, K=24)
    assert [f.read_bytes() for f in shard_files(again.out)] == [f.read_bytes() for f in shard_files(bm25_build.out)]
    assert again.manifest["distractors"] == bm25_build.manifest["distractors"]


def test_the_gold_passages_record_their_first_place_in_the_ranking(bm25_build, examples, index_dir):
    """A gold passage's ``bm25_rank``: the first place, among the first RANK_WINDOW of the question's stored
    ranking, of a passage equal to it (same normalised title and text); None when there is none."""
    from rag_curriculum.curricula.distractors import RANK_WINDOW

    ix = load_index(index_dir)
    ranked = 0
    for r in read_rows(bm25_build.out):
        ex = examples[r["source_id"]]
        keys = [passage_key(*ix.passage(int(pid))) for pid in ix.stored(ex.id, ex.question).ids[:RANK_WINDOW]
                if pid >= 0]
        for p in r["passages"]:
            if p["is_gold"]:
                key = passage_key(p["title"], p["text"])
                assert p["bm25_rank"] == (keys.index(key) + 1 if key in keys else None), (r["id"], p["title"])
                ranked += p["bm25_rank"] is not None
    assert ranked > 50


def test_the_manifest_counts_what_the_shards_show(bm25_build, examples):
    """The manifest's origins and rank buckets (counted with Arrow from the written shards) against a count of the
    rows read back one by one."""
    from collections import Counter

    from rag_curriculum.curricula._write import _rank_bucket

    origins, ranks = Counter(), Counter()
    for r in read_rows(bm25_build.out):
        for p in r["passages"]:
            origins[f"{'gold' if p['is_gold'] else 'distractor'}:{p['origin']}"] += 1
            if not p["is_gold"] and p["bm25_rank"] is not None:
                ranks[_rank_bucket(p["bm25_rank"])] += 1
    facts = bm25_build.manifest["distractors"]
    assert facts["origins"] == dict(sorted(origins.items()))
    assert facts["distractor_bm25_ranks"] == {k: v for k, v in ranks.items() if v} and len(ranks) >= 3


def test_a_build_from_the_indexed_file_trusts_its_gold_ids_and_writes_what_checking_writes(
        tmp_path, index_dir, bm25_build, examples, monkeypatch, caplog):
    """The build's input is the indexed file (same SHA-256): the gold passage ids the index stores are taken after a
    spot check. Checking every question's paragraphs instead, or building from a copy of the file with another
    checksum (not trusted), writes the same bytes; a spot check that fails falls back to checking, with a warning."""
    import rag_curriculum.curricula.distractors as distractors
    from rag_curriculum.shards import sha256_file

    exs = list(examples.values())
    source = BM25Source(load_index(index_dir))
    source.prepare(exs, inputs={"musique": sha256_file(MUSIQUE_TRAIN)})
    assert source._trusted == {"musique"}
    monkeypatch.setattr(distractors, "TRUST_INDEXED_FILE", False)
    checked = _build(tmp_path / "checked", index_dir, K=24)
    assert [f.read_bytes() for f in shard_files(checked.out)] == [f.read_bytes() for f in shard_files(bm25_build.out)]
    assert checked.manifest["distractors"] == bm25_build.manifest["distractors"]
    monkeypatch.setattr(distractors, "TRUST_INDEXED_FILE", True)
    copy = tmp_path / MUSIQUE_TRAIN.name
    copy.write_bytes(MUSIQUE_TRAIN.read_bytes() + b"\n")
    cfg = BuildConfig(sources=[SourceSpec("musique", str(copy), None)], schedule="min-max", distractors="bm25",
                      index=str(index_dir), out=str(tmp_path / "copy"), K=24)
    other = build_curriculum(cfg, command="test")
    assert [f.read_bytes() for f in shard_files(other.out)] == [f.read_bytes() for f in shard_files(bm25_build.out)]
    index = load_index(index_dir)
    real = index.gold_keys
    monkeypatch.setattr(index, "gold_keys", lambda ex, pids=None: None if ex.id == exs[3].id else real(ex, pids))
    source = BM25Source(index)
    with caplog.at_level("WARNING"):
        source.prepare(exs, inputs={"musique": sha256_file(MUSIQUE_TRAIN)})
    assert source._trusted == set() and "gold paragraphs" in caplog.text


def test_planning_half_the_rows_in_a_forked_worker_writes_the_same_build(tmp_path, index_dir, bm25_build,
                                                                          monkeypatch):
    import rag_curriculum.curricula.distractors as distractors

    monkeypatch.setattr(distractors, "PARALLEL_MIN_ROWS", 10)  # the forked half from 10 rows on
    monkeypatch.setattr(distractors, "PLAN_MARGIN", 0)  # and rows walked on past their window, in both halves
    again = _build(tmp_path / "bm25", index_dir, K=24)
    assert [f.read_bytes() for f in shard_files(again.out)] == [f.read_bytes() for f in shard_files(bm25_build.out)]
    assert again.manifest["distractors"] == bm25_build.manifest["distractors"]


@pytest.mark.parametrize("batched,want,margin", [(True, 3, 6), (False, 3, 6), (True, 1, 0), (True, 1, 1)])
def test_a_ranking_with_nothing_to_accept_is_walked_to_its_end(monkeypatch, batched, want, margin):
    """Every ranked passage is a gold copy or contains the answer: the row gets no BM25 distractor, its walk is
    done, and every passage is counted as skipped (the batched planner with no accepted passage at all; with a
    window that ends before the ranking does, so the row is planned again over all of it)."""
    import numpy as np
    from rag_retriever._index import Ranking, passage_hash

    import rag_curriculum.curricula.distractors as distractors
    from rag_curriculum.records import Document, Example

    gold = Document("Paris", "Paris is the capital of France.", True)
    ex = Example("q1", "hotpotqa", "train", "What is the capital of France?", ["Paris"],
                 [gold, Document("Lyon", "Lyon is a city.", False)])
    texts = [("Paris", gold.text), ("Paris (city)", "Paris, on the Seine."), ("France", "Its capital is Paris.")]

    class Index:
        keys = np.array([passage_hash(t, x) for t, x in texts], dtype=np.int64)

        def rankings(self, examples, progress=False):
            return {"q1": Ranking(np.array([0, 1, 2, -1, -1, -1], dtype=np.int32), np.zeros(6, np.float32), [0])}

        def gold_keys(self, ex, pids):
            return [int(self.keys[0])]

        def prefetch(self, pids, norm=False):
            pass

        def norm_spans(self):
            blob, starts, ends = b"", [], []
            for pid in range(len(texts)):
                starts.append(len(blob))
                blob += self.norm(pid).encode()
                ends.append(len(blob))
            return blob.find, np.array(starts), np.array(ends)

        def norm(self, pid):
            from rag_retriever._index import normalize_passage

            return normalize_passage(*texts[pid])

        def passage(self, pid):
            return texts[pid]

    monkeypatch.setattr(distractors, "BATCHED_PLAN", batched)
    monkeypatch.setattr(distractors, "PLAN_MARGIN", margin)
    source = distractors.BM25Source(Index())
    source.prepare([ex])
    source.plan_hint([(ex, want)])
    assert source.available(ex, want) == 0 and source.ranked(ex, want) == []
    assert source._walks["q1"].done and source._walks["q1"].pos == 3
    assert dict(source.excluded) == {"gold_copy": 1, "answer": 2}
