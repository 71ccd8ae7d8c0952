"""Each layout (small fixtures written here), each bad-input kind, and the dataset sniffing."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rag_curriculum import DataError, WrongDatasetError, load_examples, sniff_dataset
from rag_curriculum.errors import SkipReport


def hotpot_official(i: int = 0, **over) -> dict:
    rec = {
        "_id": f"hp{i}", "question": f"Which is older, A{i} or B{i}?", "answer": "A",
        "supporting_facts": [["A", 0], ["B", 1]],
        "context": [["A", ["A is old.", " Very old."]], ["X", ["X is a distractor."]],
                    ["B", ["B is new.", " Quite new."]]],
        "type": "comparison", "level": "hard",
    }
    rec.update(over)
    return rec


def hotpot_hub(i: int = 0, with_id: bool = True) -> dict:
    r = hotpot_official(i)
    row = {"question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
           "supporting_facts": {"title": [t for t, _ in r["supporting_facts"]],
                                "sent_id": [s for _, s in r["supporting_facts"]]},
           "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]}}
    if with_id:
        row = {"id": r["_id"], **row}
    return row


def musique(i: int = 0, **over) -> dict:
    rec = {
        "id": f"2hop__{i}_{i + 1}", "question": "Who founded the publisher of X?",
        "paragraphs": [{"idx": 0, "title": "X", "paragraph_text": "X is published by P.", "is_supporting": True},
                       {"idx": 1, "title": "P", "paragraph_text": "P was founded by F.", "is_supporting": True},
                       {"idx": 2, "title": "P", "paragraph_text": "P is a publisher.", "is_supporting": False}],
        "question_decomposition": [
            {"id": 1, "question": "Who publishes X?", "answer": "P", "paragraph_support_idx": 0},
            {"id": 2, "question": "Who founded #1?", "answer": "F", "paragraph_support_idx": 1}],
        "answer": "F", "answer_aliases": ["Mr F", "F"], "answerable": True,
    }
    rec.update(over)
    return rec


def twowiki_official(i: int = 0, extras: bool = True, **over) -> dict:
    rec = {
        "_id": f"w{i}", "type": "compositional", "question": "When was the director of Film born?",
        "context": [["Film", ["Film is directed by D."]], ["Other", ["Other text."]], ["D", ["D was born in 1950."]]],
        "supporting_facts": [["Film", 0], ["D", 0]],
        "evidences": [["Film", "director", "D"], ["D", "date of birth", "1950"]], "answer": "1950",
    }
    if extras:
        rec.update({"entity_ids": "Q1_Q2", "evidences_id": [["Q1", "director", "Q2"]], "answer_id": None})
    rec.update(over)
    return rec


def twowiki_hub(i: int = 0) -> dict:
    r = twowiki_official(i, extras=False)
    return {"id": r["_id"], "type": r["type"], "question": r["question"],
            "context": {"title": [t for t, _ in r["context"]], "content": [s for _, s in r["context"]]},
            "supporting_facts": {"title": ["Film", "D"], "sent_id": [0, 0]},
            "evidences": {"fact": ["Film", "D"], "relation": ["director", "date of birth"], "entity": ["D", "1950"]},
            "answer": r["answer"]}


def write(tmp_path: Path, name: str, records: list, layout: str) -> Path:
    p = tmp_path / name
    if layout == "json":
        p.write_text(json.dumps(records), encoding="utf-8")
    elif layout == "jsonl":
        p.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(records), p)
    return p


# ---------------------------------------------------------------- layouts

@pytest.mark.parametrize(("dataset", "make", "layout"), [
    ("hotpotqa", hotpot_official, "json"),
    ("hotpotqa", hotpot_hub, "jsonl"),
    ("hotpotqa", hotpot_hub, "parquet"),
    ("hotpotqa", lambda i: hotpot_hub(i, with_id=False), "jsonl"),
    ("musique", musique, "jsonl"),
    ("musique", musique, "json"),
    ("musique", musique, "parquet"),
    ("2wikimultihopqa", twowiki_official, "json"),
    ("2wikimultihopqa", lambda i: twowiki_official(i, extras=False), "json"),
    ("2wikimultihopqa", twowiki_hub, "jsonl"),
    ("2wikimultihopqa", twowiki_hub, "parquet"),
])
def test_layouts_load_to_the_same_examples(tmp_path, dataset, make, layout):
    path = write(tmp_path, f"train.{ 'jsonl' if layout == 'jsonl' else layout}", [make(i) for i in range(3)], layout)
    examples = list(load_examples(dataset, path))
    assert len(examples) == 3
    assert sniff_dataset(path) == dataset
    ex = examples[0]
    assert ex.split == "train"
    assert ex.hops == 2
    assert [d.is_gold for d in ex.documents] == {"musique": [True, True, False]}.get(dataset, [True, False, True])
    if dataset == "hotpotqa":
        assert ex.documents[0].text == "A is old. Very old."
    if dataset == "musique":
        assert ex.answers == ["F", "Mr F"]
        assert ex.decomposition[1]["paragraph_support_idx"] == 1
    if dataset == "2wikimultihopqa":
        assert ex.extra["evidences"][0] == ["Film", "director", "D"]
    assert len({e.id for e in examples}) == 3


def test_rows_without_id_get_stable_content_ids(tmp_path):
    path = write(tmp_path, "hub.jsonl", [hotpot_hub(i, with_id=False) for i in range(3)], "jsonl")
    a = [e.id for e in load_examples("hotpotqa", path)]
    b = [e.id for e in load_examples("hotpotqa", path)]
    assert a == b and len(set(a)) == 3 and all(len(x) == 16 for x in a)


def test_repeated_title_gold_decided_by_sentence(tmp_path):
    rec = hotpot_official(context=[["A", ["Only one sentence."]], ["X", ["x"]], ["B", ["b0", " b1"]],
                                   ["A", ["First.", " Second.", " Third."]]],
                          supporting_facts=[["A", 2], ["B", 1]])
    ex = next(iter(load_examples("hotpotqa", write(tmp_path, "t.json", [rec], "json"))))
    assert [d.is_gold for d in ex.documents] == [False, False, True, True]
    assert [d.title for d in ex.documents] == ["A", "X", "B", "A"]


def test_two_facts_on_one_paragraph_make_one_gold_document(tmp_path):
    rec = hotpot_official(supporting_facts=[["A", 0], ["A", 1], ["B", 0]])
    ex = next(iter(load_examples("hotpotqa", write(tmp_path, "t.json", [rec], "json"))))
    assert ex.hops == 2


def test_split_from_file_name_and_explicit(tmp_path):
    p = write(tmp_path, "hotpot_dev_distractor_v1.json", [hotpot_official()], "json")
    assert next(iter(load_examples("hotpotqa", p))).split == "dev"
    assert next(iter(load_examples("hotpotqa", p, split="validation"))).split == "validation"


def test_dataset_name_typo_and_aliases(tmp_path):
    p = write(tmp_path, "t.json", [twowiki_official()], "json")
    assert len(list(load_examples("2wiki", p))) == 1
    with pytest.raises(KeyError, match="did you mean 'musique'"):
        load_examples("musiqe", p)


# ---------------------------------------------------------------- sniffing

@pytest.mark.parametrize(("actual", "make", "claimed"), [
    ("musique", musique, "hotpotqa"),
    ("hotpotqa", hotpot_official, "2wikimultihopqa"),
    ("2wikimultihopqa", twowiki_official, "hotpotqa"),
    ("2wikimultihopqa", twowiki_hub, "musique"),
])
def test_file_of_another_dataset_says_which(tmp_path, actual, make, claimed):
    p = write(tmp_path, "x.jsonl", [make()], "jsonl")
    with pytest.raises(WrongDatasetError, match=f"looks like a '{actual}' file, not '{claimed}'"):
        list(load_examples(claimed, p))


def test_unknown_layout_sniff(tmp_path):
    p = write(tmp_path, "x.jsonl", [{"foo": 1}], "jsonl")
    with pytest.raises(WrongDatasetError, match="matches no known dataset"):
        sniff_dataset(p)


# ---------------------------------------------------------------- bad input

BAD = [
    # (kind, dataset, records mutator, expected field)
    ("missing_field", "hotpotqa", lambda: {k: v for k, v in hotpot_official().items() if k != "question"}, "question"),
    ("wrong_type", "hotpotqa", lambda: hotpot_official(answer=42), "answer"),
    ("empty_answer", "hotpotqa", lambda: hotpot_official(answer="  "), "answer"),
    ("no_gold", "hotpotqa", lambda: hotpot_official(supporting_facts=[]), "supporting_facts"),
    ("dangling_supporting_fact", "hotpotqa", lambda: hotpot_official(supporting_facts=[["Nope", 0], ["B", 0]]),
     "supporting_facts"),
    ("dangling_supporting_fact", "hotpotqa", lambda: hotpot_official(
        context=[["A", ["a0"]], ["A", ["a0", " a1"]], ["B", ["b0"]]], supporting_facts=[["A", 7], ["B", 0]]),
     "supporting_facts"),
    ("dangling_supporting_fact", "hotpotqa", lambda: hotpot_official(supporting_facts=[["A", -1], ["B", 0]]),
     "supporting_facts"),
    ("wrong_type", "hotpotqa", lambda: hotpot_official(context=[["A", ["a0", None]], ["B", ["b0", " b1"]]]),
     "context[0].sentences"),
    ("wrong_type", "2wikimultihopqa", lambda: twowiki_official(context=[["Film", ["f"]], ["D", [None]]]),
     "context[1].sentences"),
    ("wrong_type", "hotpotqa", lambda: hotpot_official(context=[["A", 3]]), "context[0].sentences"),
    ("missing_field", "musique", lambda: {k: v for k, v in musique().items() if k != "paragraphs"}, "paragraphs"),
    ("wrong_type", "musique", lambda: musique(answer_aliases="F"), "answer_aliases"),
    ("empty_answer", "musique", lambda: musique(answer=""), "answer"),
    ("no_gold", "musique", lambda: musique(paragraphs=[
        {"idx": 0, "title": "X", "paragraph_text": "x", "is_supporting": False}], question_decomposition=[]),
     "paragraphs"),
    ("wrong_type", "musique", lambda: musique(paragraphs=[
        {"idx": 0, "title": "X", "paragraph_text": "x", "is_supporting": "yes"}]), "paragraphs[0].is_supporting"),
    ("dangling_supporting_fact", "musique", lambda: musique(question_decomposition=[
        {"id": 1, "question": "q", "answer": "a", "paragraph_support_idx": 9}]),
     "question_decomposition[0].paragraph_support_idx"),
    ("dangling_supporting_fact", "2wikimultihopqa",
     lambda: twowiki_official(supporting_facts=[["Film", 0], ["Missing", 0]]), "supporting_facts"),
    ("missing_field", "2wikimultihopqa", lambda: {k: v for k, v in twowiki_official().items() if k != "answer"},
     "answer"),
]


@pytest.mark.parametrize(("kind", "dataset", "make", "field"), BAD, ids=[f"{b[1]}-{b[0]}-{b[3]}" for b in BAD])
def test_bad_record_raises_naming_file_record_field(tmp_path, kind, dataset, make, field):
    good = {"hotpotqa": hotpot_official, "musique": musique, "2wikimultihopqa": twowiki_official}[dataset]
    records = [good(0), good(1), make()]
    p = write(tmp_path, "bad.json", records, "json")
    with pytest.raises(DataError) as ei:
        list(load_examples(dataset, p))
    err = ei.value
    assert err.kind == kind
    assert str(p) in str(err)
    assert "index 2" in str(err)
    assert err.field == field and repr(field) in str(err)


@pytest.mark.parametrize(("kind", "dataset", "make", "field"), BAD, ids=[f"{b[1]}-{b[0]}-{b[3]}" for b in BAD])
def test_skip_policy_counts_each_kind(tmp_path, kind, dataset, make, field):
    good = {"hotpotqa": hotpot_official, "musique": musique, "2wikimultihopqa": twowiki_official}[dataset]
    p = write(tmp_path, "bad.jsonl", [good(0), make(), good(1), make()], "jsonl")
    stream = load_examples(dataset, p, on_error="skip")
    examples = list(stream)
    assert len(examples) == 2
    assert stream.report.counts == {kind: 2}
    assert "line 2" in stream.report.examples[kind][0]
    assert "line 4" in stream.report.examples[kind][1]


def test_record_id_is_named_in_errors(tmp_path):
    p = write(tmp_path, "bad.json", [hotpot_official(7, answer="")], "json")
    with pytest.raises(DataError, match=r"index 0 \(id hp7\)"):
        list(load_examples("hotpotqa", p))


def test_truncated_json_list(tmp_path, caplog):
    p = tmp_path / "hotpot_train.json"
    full = json.dumps([hotpot_official(i) for i in range(3)])
    p.write_text(full[: len(full) - 40], encoding="utf-8")
    with pytest.raises(DataError, match=r"invalid JSON at line 1, column \d+") as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_json" and str(p) in str(ei.value)
    report = SkipReport()
    examples = list(load_examples("hotpotqa", p, on_error="skip", report=report))
    assert [e.id for e in examples] == ["hp0", "hp1"], "complete records before the break are recovered"
    assert report.counts == {"invalid_json": 1}
    assert "index 2" in report.examples["invalid_json"][0]
    assert "skipped 1 record(s) (invalid_json: 1)" in caplog.text


def test_invalid_jsonl_line(tmp_path):
    p = tmp_path / "musique_ans_v1.0_train.jsonl"
    p.write_text(json.dumps(musique(0)) + "\n{not json\n\n" + json.dumps(musique(1)) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2") as ei:
        list(load_examples("musique", p))
    assert ei.value.kind == "invalid_json"
    stream = load_examples("musique", p, on_error="skip")
    assert len(list(stream)) == 2 and stream.report.counts == {"invalid_json": 1}


def test_record_that_is_not_an_object(tmp_path):
    p = write(tmp_path, "m.jsonl", [musique(0), [1, 2]], "jsonl")
    with pytest.raises(DataError, match="line 2") as ei:
        list(load_examples("musique", p))
    assert ei.value.kind == "wrong_type"


def test_empty_and_missing_files(tmp_path):
    p = tmp_path / "empty.json"
    p.write_text("")
    with pytest.raises(DataError, match="empty"):
        list(load_examples("hotpotqa", p))
    with pytest.raises(FileNotFoundError, match="no such file"):
        list(load_examples("hotpotqa", tmp_path / "nope.json"))


def test_hotpot_sentence_overflow_on_a_unique_title_marks_it_and_is_counted(tmp_path):
    p = write(tmp_path, "train.json", [hotpot_official(supporting_facts=[["A", 7], ["B", 0]])], "json")
    ex = next(iter(load_examples("hotpotqa", p)))
    assert [d.is_gold for d in ex.documents] == [True, False, True]
    assert ex.extra["sentence_out_of_range"] == 1


def test_gold_resolution_does_not_depend_on_the_order_of_facts(tmp_path):
    context = [["T", ["t0"]], ["T", ["t0", " t1", " t2"]], ["U", ["u0"]]]
    a = hotpot_official(context=context, supporting_facts=[["T", 0], ["T", 2], ["U", 0]])
    b = hotpot_official(context=context, supporting_facts=[["T", 2], ["T", 0], ["U", 0]])
    ea, eb = (next(iter(load_examples("hotpotqa", write(tmp_path, f"{n}.json", [r], "json"))))
              for n, r in (("a", a), ("b", b)))
    assert [d.is_gold for d in ea.documents] == [d.is_gold for d in eb.documents] == [False, True, True]


def test_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "hotpot_train.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps([hotpot_official(0), hotpot_official(1)]).encode())
    assert len(list(load_examples("hotpotqa", p))) == 2
    p = tmp_path / "musique_train.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(musique(i)) + "\n" for i in range(3)).encode())
    assert len(list(load_examples("musique", p))) == 3


def test_a_corrupt_record_in_a_json_list_loses_only_itself_under_skip(tmp_path):
    records = [json.dumps(twowiki_official(i)) for i in range(6)]
    records[2] = records[2][:40] + "}"  # a broken record in the middle
    p = tmp_path / "train.json"
    p.write_text("[" + ", ".join(records) + "]", encoding="utf-8")
    with pytest.raises(DataError, match="invalid JSON"):
        list(load_examples("2wikimultihopqa", p))
    stream = load_examples("2wikimultihopqa", p, on_error="skip")
    assert [e.id for e in stream] == ["w0", "w1", "w3", "w4", "w5"]
    assert stream.report.counts == {"invalid_json": 1}
    assert "index 2" in stream.report.examples["invalid_json"][0]


@pytest.mark.parametrize(("name", "split"), [
    ("hotpot_train_v1.1.json", "train"), ("hotpot_dev_distractor_v1.json", "dev"), ("musique_ans_v1.0_dev.jsonl", "dev"),
    ("hub_distractor_validation.sample300.jsonl", "dev"), ("train.sample500.json", "train"), ("test.parquet", "test"),
    ("constraints.json", None), ("latest.json", None), ("data.json", None)])
def test_split_guessed_from_words_of_the_file_name(name, split):
    from rag_curriculum.loaders import guess_split

    assert guess_split(Path(name)) == split


def test_2wiki_sentence_overflow_tolerated_but_counted(tmp_path):
    p = write(tmp_path, "train.json", [twowiki_official(supporting_facts=[["Film", 5], ["D", 0]])], "json")
    ex = next(iter(load_examples("2wikimultihopqa", p)))
    assert ex.hops == 2 and ex.extra["sentence_out_of_range"] == 1


def test_musique_full_unanswerable_loads_marked(tmp_path):
    rec = musique(answerable=False, paragraphs=[
        {"idx": 0, "title": "X", "paragraph_text": "x", "is_supporting": False}], question_decomposition=[])
    ex = next(iter(load_examples("musique", write(tmp_path, "musique_full_v1.0_dev.jsonl", [rec], "jsonl"))))
    assert ex.extra["answerable"] is False and ex.hops == 0


def test_hub_download_without_network_names_the_path_alternative(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"pass it as path=\.\.\. \(CLI: --input PATH\)"):
        next(iter(load_examples("musique", None, split="train")))


def test_hub_path_names_another_copy(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"could not load musique \(bdsaglam/musique, split 'validation'\)"):
        next(iter(load_examples("musique", "hf://bdsaglam/musique", split="dev")))
