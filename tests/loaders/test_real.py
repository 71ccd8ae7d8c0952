"""Every file in ../shared/data loads with on_error="raise", checked against the source's own fields."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, MUSIQUE_DEV, MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum import load_examples, sniff_dataset

FILES = [
    ("hotpotqa", HOTPOT_TRAIN, 100, "train"),
    ("hotpotqa", HOTPOT_HUB, 300, "dev"),
    ("musique", MUSIQUE_TRAIN, 100, "train"),
    ("musique", MUSIQUE_DEV, 200, "dev"),
    ("2wikimultihopqa", TWOWIKI_TRAIN, 500, "train"),
]


def raw_records(path):
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(("dataset", "path", "count", "split"), FILES, ids=[f[1].name for f in FILES])
def test_every_shared_file_loads_with_raise(shared_data, dataset, path, count, split):
    examples = list(load_examples(dataset, path, on_error="raise"))
    assert len(examples) == count
    assert {e.split for e in examples} == {split}
    assert {e.source for e in examples} == {dataset}
    assert len({e.id for e in examples}) == count, "ids must be unique"
    assert sniff_dataset(path) == dataset


def test_musique_gold_matches_is_supporting_per_paragraph(shared_data):
    for path in (MUSIQUE_TRAIN, MUSIQUE_DEV):
        raw = raw_records(path)
        examples = list(load_examples("musique", path))
        for r, ex in zip(raw, examples, strict=True):
            assert ex.id == r["id"]
            assert [d.title for d in ex.documents] == [p["title"] for p in r["paragraphs"]]
            assert [d.text for d in ex.documents] == [p["paragraph_text"] for p in r["paragraphs"]]
            assert [d.is_gold for d in ex.documents] == [p["is_supporting"] for p in r["paragraphs"]]
            assert ex.hops == sum(p["is_supporting"] for p in r["paragraphs"]) == len(r["question_decomposition"])
            aliases = [a for a in r["answer_aliases"] if a != r["answer"]]
            assert ex.answers == [r["answer"], *dict.fromkeys(aliases)]
            assert [s["paragraph_support_idx"] for s in ex.decomposition] == [
                q["paragraph_support_idx"] for q in r["question_decomposition"]]


def test_musique_repeated_gold_titles_are_both_gold(shared_data):
    ex = next(e for e in load_examples("musique", MUSIQUE_TRAIN) if e.id == "2hop__6584_6587")
    canon = [d for d in ex.documents if d.title == "Canon law"]
    assert len(canon) == 2 and all(d.is_gold for d in canon)
    assert ex.hops == 2
    # a repeated title with one gold and one distractor: decided per paragraph, not by title
    ex = next(e for e in load_examples("musique", MUSIQUE_TRAIN) if e.id == "4hop1__709382_146811_31223_91015")
    assert [d.is_gold for d in ex.documents if d.title == "Publix"] == [False, True]


@pytest.mark.parametrize(("dataset", "path"), [("hotpotqa", HOTPOT_TRAIN), ("hotpotqa", HOTPOT_HUB),
                                               ("2wikimultihopqa", TWOWIKI_TRAIN)])
def test_sentence_level_gold_matches_supporting_facts(shared_data, dataset, path):
    raw = raw_records(path)
    examples = list(load_examples(dataset, path))
    multi_paragraph_count = 0
    for r, ex in zip(raw, examples, strict=True):
        ctx = r["context"]
        if isinstance(ctx, dict):
            titles = ctx["title"]
            sents = ctx.get("sentences") or ctx.get("content")
            facts = list(zip(r["supporting_facts"]["title"], r["supporting_facts"]["sent_id"], strict=True))
        else:
            titles = [t for t, _ in ctx]
            sents = [s for _, s in ctx]
            facts = [tuple(f) for f in r["supporting_facts"]]
        assert [d.title for d in ex.documents] == titles, "every paragraph kept, in source order"
        assert len(ex.documents) == len(titles)
        gold_titles = {d.title for d in ex.documents if d.is_gold}
        assert gold_titles == {t for t, _ in facts}
        assert ex.hops == len({t for t, _ in facts})
        multi_paragraph_count += len(ex.documents) > 2
        for d, s in zip(ex.documents, sents, strict=True):
            # sentences keep their own whitespace (HotpotQA's carry a leading space); one space is added only
            # where two sentences would otherwise touch (2Wiki's, and a few HotpotQA boundaries)
            expected = ""
            for x in s:
                glue = " " if expected and x and not expected[-1].isspace() and not x[0].isspace() else ""
                expected += glue + x
            assert d.text == expected.strip()
        assert ex.answers == [r["answer"]]
        assert ex.qtype == r["type"]
        assert ex.supporting_facts == facts
    assert multi_paragraph_count > 0


def test_2wiki_known_quirks(shared_data):
    examples = {e.id: e for e in load_examples("2wikimultihopqa", TWOWIKI_TRAIN)}
    # supporting-fact sentence ids past the end of their paragraph: tolerated, counted, still gold
    ex = examples["e2d3bbb60bd911eba7f7acde48001122"]
    assert ex.extra["sentence_out_of_range"] == 1
    assert any(d.is_gold and d.title == "Prince Hubertus of Hohenzollern" for d in ex.documents)
    # repeated (duplicated) distractor titles are kept, both of them
    ex = examples["145caecb097511ebbdb0ac1f6bf848b6"]
    assert [d.title for d in ex.documents].count("Bustanak") == 2
    assert sum(len(e.documents) for e in examples.values()) == 5000
    assert sum(e.hops == 4 for e in examples.values()) == 92
    assert "evidences" in ex.extra


def test_hotpot_short_contexts_kept(shared_data):
    hub = list(load_examples("hotpotqa", HOTPOT_HUB))
    assert sorted(len(e.documents) for e in hub)[:3] == [2, 4, 4]
    assert all(e.extra.get("level") in {"easy", "medium", "hard"} for e in hub)


@pytest.mark.slow
def test_importing_the_package_does_not_import_heavy_libraries():
    code = ("import sys, rag_curriculum, rag_curriculum.loaders, rag_curriculum.curricula, rag_curriculum.cli; "
            "bad = [m for m in ('torch', 'transformers', 'vllm', 'trl') if m in sys.modules]; print(bad)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"
