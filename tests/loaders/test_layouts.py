"""Each layout (small fixtures written here), each bad-input kind, and the dataset sniffing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rag_curriculum import DataError, WrongDatasetError, load_examples, sniff_dataset
from rag_curriculum.errors import CurriculumError, SkipReport


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
    with pytest.raises(DataError, match=r"index 2 \(id hp2\): the file ends inside this record \(truncated file\?\)"
                       r".* at line 1, column \d+ \(byte offset \d+\)") as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_json" and str(p) in str(ei.value) and ei.value.record == "index 2 (id hp2)"
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


# ---------------------------------------------------------------- damaged JSON lists: located, counted, the rest kept

def _json_list(tmp_path: Path, pieces: list[bytes], name: str = "train.json") -> Path:
    p = tmp_path / name
    p.write_bytes(b"[" + b", ".join(pieces) + b"]")
    return p


def _pieces(n: int = 5) -> list[bytes]:
    return [json.dumps(hotpot_official(i)).encode() for i in range(n)]


def test_invalid_utf8_in_a_json_list_is_located_and_skipped(tmp_path):
    pieces = _pieces()
    pieces[2] = pieces[2].replace(b'"question": "', b'"question": "\xff\xfe', 1)
    p = _json_list(tmp_path, pieces)
    with pytest.raises(DataError) as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_utf8" and ei.value.record == "index 2 (id hp2)" and ei.value.field == "question"
    assert re.search(r"invalid UTF-8 \(byte 0xff\) at line 1, column \d+ \(byte offset \d+\)", str(ei.value))
    stream = load_examples("hotpotqa", p, on_error="skip")
    examples = list(stream)
    assert [e.id for e in examples] == ["hp0", "hp1", "hp3", "hp4"], "the damaged record is skipped, never kept"
    assert not any("\ufffd" in e.question for e in examples)
    assert stream.report.counts == {"invalid_utf8": 1}


def test_invalid_utf8_in_jsonl_is_the_same_kind(tmp_path):
    p = tmp_path / "m.jsonl"
    lines = [json.dumps(musique(i)).encode() for i in range(3)]
    lines[1] = lines[1].replace(b'"question": "', b'"question": "\xc3', 1)
    p.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError) as ei:
        list(load_examples("musique", p))
    assert ei.value.kind == "invalid_utf8" and ei.value.record.startswith("line 2") and ei.value.field == "question"
    stream = load_examples("musique", p, on_error="skip")
    assert len(list(stream)) == 2 and stream.report.counts == {"invalid_utf8": 1}


def test_trailing_garbage_after_a_json_list_is_counted(tmp_path):
    p = tmp_path / "train.json"
    p.write_bytes(b"[" + b", ".join(_pieces(3)) + b"] trailing")
    with pytest.raises(DataError, match=r"after index 2: unexpected content after the end of the JSON list") as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_json"
    stream = load_examples("hotpotqa", p, on_error="skip")
    assert [e.id for e in stream] == ["hp0", "hp1", "hp2"]
    assert stream.report.counts == {"invalid_json": 1}


def test_a_deeply_nested_record_is_a_data_error_and_loses_only_itself(tmp_path):
    pieces = _pieces()
    pieces[1] = b'{"deep": ' + b"[" * 5000 + b"]" * 5000 + b", " + pieces[1][1:]
    p = _json_list(tmp_path, pieces)
    with pytest.raises(DataError, match="nested too deeply") as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_json" and ei.value.record.startswith("index 1")
    stream = load_examples("hotpotqa", p, on_error="skip")
    assert [e.id for e in stream] == ["hp0", "hp2", "hp3", "hp4"]
    assert stream.report.counts == {"invalid_json": 1}


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_nan_and_infinity_are_one_kind_in_both_modes(tmp_path, constant, layout):
    pieces = _pieces(3)
    pieces[1] = pieces[1].replace(b'"answer": "A"', b'"answer": ' + constant, 1)
    p = tmp_path / f"train.{layout}"
    p.write_bytes(b"[" + b", ".join(pieces) + b"]" if layout == "json" else b"\n".join(pieces) + b"\n")
    with pytest.raises(DataError) as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "invalid_json" and ei.value.field == "answer" and "not valid JSON" in str(ei.value)
    stream = load_examples("hotpotqa", p, on_error="skip")
    assert [e.id for e in stream] == ["hp0", "hp2"]
    assert stream.report.counts == {"invalid_json": 1}
    assert stream.report.examples["invalid_json"][0].split(": ", 1)[1] == str(ei.value).split(": ", 1)[1]


def test_a_missing_comma_between_records_is_counted_and_both_kept(tmp_path):
    pieces = _pieces(4)
    p = tmp_path / "train.json"
    p.write_bytes(b"[" + pieces[0] + b", " + pieces[1] + b" " + pieces[2] + b", " + pieces[3] + b"]")
    with pytest.raises(DataError, match=r"after index 1: expected ',' or '\]' after the record"):
        list(load_examples("hotpotqa", p))
    stream = load_examples("hotpotqa", p, on_error="skip")
    assert [e.id for e in stream] == ["hp0", "hp1", "hp2", "hp3"] and stream.report.counts == {"invalid_json": 1}


def test_resync_does_not_take_a_nested_object_for_a_record(tmp_path):
    # MuSiQue as a JSON list: a record broken before its paragraphs must not yield its paragraph objects
    pieces = [json.dumps(musique(i)).encode() for i in range(4)]
    pieces[2] = pieces[2].replace(b'"id": ', b'"id" ', 1)
    p = _json_list(tmp_path, pieces, "musique_train.json")
    stream = load_examples("musique", p, on_error="skip")
    assert [e.id for e in stream] == ["2hop__0_1", "2hop__1_2", "2hop__3_4"]
    assert stream.report.counts == {"invalid_json": 1}


def test_an_id_reused_by_a_different_question_is_a_conflict_naming_both(tmp_path):
    recs = [hotpot_official(i) for i in range(4)]
    recs[3]["_id"] = "hp1"
    p = write(tmp_path, "train.json", recs, "json")
    with pytest.raises(DataError) as ei:
        list(load_examples("hotpotqa", p))
    err = ei.value
    assert err.kind == "conflicting_id" and err.record == "index 3 (id hp1)" and err.field == "_id"
    assert "already used by index 1" in str(err)
    stream = load_examples("hotpotqa", p, on_error="skip")
    assert [e.id for e in stream] == ["hp0", "hp1", "hp2"] and stream.report.counts == {"conflicting_id": 1}
    # an exact repeat is not a conflict: yielded (the builder uses it once) and counted apart
    p = write(tmp_path, "dup.jsonl", [hotpot_official(0), hotpot_official(1), hotpot_official(0)], "jsonl")
    stream = load_examples("hotpotqa", p)
    assert [e.id for e in stream] == ["hp0", "hp1", "hp0"] and stream.duplicates == 1 and not stream.report.total


def test_empty_question_is_refused(tmp_path):
    p = write(tmp_path, "train.json", [hotpot_official(0, question="  ")], "json")
    with pytest.raises(DataError) as ei:
        list(load_examples("hotpotqa", p))
    assert ei.value.kind == "empty_question" and ei.value.field == "question"


@pytest.mark.parametrize(("make", "field", "fragment"), [
    (lambda: hotpot_official(supporting_facts=[[None, 0], ["B", 1]]), "supporting_facts[0]",
     "expected a pair (title, sentence index), got [null, 0]"),
    (lambda: hotpot_official(context=[["A"], ["B", ["b"]]]), "context[0]",
     'expected a pair (title, list of sentences), got ["A"]'),
    (lambda: hotpot_official(answer=None), "answer", "expected a string, got null"),
    (lambda: hotpot_official(context=[["A", ["a", None]], ["B", ["b0", " b1"]]]), "context[0].sentences",
     "sentence 1 is null, expected a string"),
])
def test_messages_read_well_and_print_as_they_are(tmp_path, monkeypatch, make, field, fragment):
    from typer.testing import CliRunner

    from rag_curriculum.cli import app

    monkeypatch.chdir(tmp_path)
    write(tmp_path, "train.json", [hotpot_official(0), make()], "json")
    with pytest.raises(DataError) as ei:
        list(load_examples("hotpotqa", "train.json"))
    msg = str(ei.value)
    assert ei.value.field == field and fragment in msg
    r = CliRunner().invoke(app, ["inspect", "train.json"])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == f"error: {msg}", "printed whole, on one line, nothing taken for markup"


def test_a_directory_as_input_says_so_once(tmp_path):
    with pytest.raises(IsADirectoryError) as ei:
        list(load_examples("hotpotqa", tmp_path))
    assert str(ei.value).startswith(f"{tmp_path}: is a directory; pass one data file")
    assert isinstance(ei.value, CurriculumError)  # the CLI prints it as it is, not as "<filename>: <strerror>"


def test_corrupt_parquet_row_group_is_located_and_skipped(tmp_path, monkeypatch):
    import rag_curriculum.loaders._io as io

    p = tmp_path / "musique_train.parquet"
    pq.write_table(pa.Table.from_pylist([musique(i) for i in range(6)]), p, row_group_size=2)
    real = pq.ParquetFile.iter_batches

    def iter_batches(self, *a, row_groups=None, **kw):
        if row_groups == [1]:
            raise OSError("Corrupt snappy compressed data.")
        return real(self, *a, row_groups=row_groups, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)
    assert io.PARQUET_BATCH_ROWS >= 2
    with pytest.raises(DataError, match=r"row 2: row group 1 \(rows 2\.\.3\) cannot be read") as ei:
        list(load_examples("musique", p))
    assert ei.value.kind == "invalid_parquet"
    stream = load_examples("musique", p, on_error="skip")
    assert [e.id for e in stream] == ["2hop__0_1", "2hop__1_2", "2hop__4_5", "2hop__5_6"]
    assert stream.report.counts == {"invalid_parquet": 1}


def test_sniffing_looks_past_a_damaged_first_record(tmp_path):
    recs = [{k: v for k, v in musique(0).items() if k not in ("question_decomposition", "answer_aliases")},
            musique(1), musique(2)]
    p = write(tmp_path, "m.jsonl", recs, "jsonl")
    assert sniff_dataset(p) == "musique"
    p.write_text("{broken\n" + json.dumps(musique(1)) + "\n")
    with pytest.raises(DataError):
        sniff_dataset(p)
    assert sniff_dataset(p, on_error="skip") == "musique"


def test_a_broken_first_record_of_a_json_list_loses_only_itself_under_skip(tmp_path):
    """With no good record read yet, the resync must not take a paragraph or a decomposition step nested in the
    broken record for the next record (nor the ']' that closes its paragraph list for the end of the file)."""
    import json

    from conftest import MUSIQUE_TRAIN

    from rag_curriculum import load_examples

    recs = [json.loads(line) for line in MUSIQUE_TRAIN.read_text(encoding="utf-8").splitlines()[:4]]
    text = json.dumps(recs)
    i = text.index('}, {"idx"')  # the comma between record 0's first two paragraphs
    path = tmp_path / "musique.json"
    path.write_text(text[:i + 1] + text[i + 2:], encoding="utf-8")
    stream = load_examples("musique", str(path), on_error="skip")
    assert [e.id for e in stream] == [r["id"] for r in recs[1:]]
    assert dict(stream.report.counts) == {"invalid_json": 1}
