"""FlashRAG's question files (id, question, golden_answers, metadata; one JSON object per line, in a folder named
after the set), on hand-made files in that layout: what is read, one located error per bad record (file, line,
field) or a count by kind under skip, the closed-context build's refusal, and `curriculum eval --agent` end to end
on a FlashRAG file of real MuSiQue questions with a real BM25 index."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum import DataError, WrongDatasetError, load_examples
from rag_curriculum.cli import app
from rag_curriculum.errors import UsageError
from rag_curriculum.loaders import get_loader, load_flashrag, sniff_dataset

runner = CliRunner()

GOOD = [
    {
        "id": "test_0",
        "question": "who got the first nobel prize in physics",
        "golden_answers": ["Wilhelm Conrad Röntgen"],
    },
    {
        "id": "test_1",
        "question": "when is the next deadpool movie being released",
        "golden_answers": ["May 18, 2018", "May 18, 2018", " ", "2018"],
        "metadata": {"source": "hand"},
    },
    {"id": 2, "question": "how many episodes are in season one of star trek", "golden_answers": ["29"]},
]


def _write(path, records, raw_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reads_flashrag_layout(tmp_path):
    s = load_flashrag(_write(tmp_path / "FlashRAG_datasets" / "nq" / "test.jsonl", GOOD))
    assert (s.name, s.split) == ("nq", "test")
    assert [r["id"] for r in s.rows] == ["test_0", "test_1", "2"]
    assert s.rows[1]["answers"] == ["May 18, 2018", "2018"]  # duplicates and blanks out, order kept
    assert all(r["passages"] == [] and r["data_source"] == "nq" for r in s.rows)
    mq = load_flashrag(
        _write(
            tmp_path / "musique" / "dev.jsonl",
            [
                {
                    "id": "2hop__1_2",
                    "question": "q?",
                    "golden_answers": ["a"],
                    "metadata": {"type": "compose"},
                },
                {"id": "2hop__1_2", "question": "q?", "golden_answers": ["a"]},
            ],
        )
    )
    assert mq.name == "musique" and mq.rows[0]["hops"] == 2 and mq.rows[0]["qtype"] == "compose"
    assert (
        len(mq.rows) == 2 and mq.duplicates == 1
    )  # an exact repeat is kept and counted, as the other loaders do
    assert load_flashrag(_write(tmp_path / "x" / "bamboogle_test.jsonl", GOOD[:1])).name == "bamboogle"


BAD = [  # (what is wrong, the record on line 2, kind, field)
    ("not an object", ["x"], "wrong_type", None),
    ("no id", {"question": "q", "golden_answers": ["a"]}, "missing_field", "id"),
    ("id a list", {"id": [1], "question": "q", "golden_answers": ["a"]}, "wrong_type", "id"),
    ("no question", {"id": "b", "golden_answers": ["a"]}, "missing_field", "question"),
    ("empty question", {"id": "b", "question": "  ", "golden_answers": ["a"]}, "empty_question", "question"),
    ("no answers", {"id": "b", "question": "q"}, "missing_field", "golden_answers"),
    ("answers a string", {"id": "b", "question": "q", "golden_answers": "a"}, "wrong_type", "golden_answers"),
    (
        "answer not a string",
        {"id": "b", "question": "q", "golden_answers": ["a", 3]},
        "wrong_type",
        "golden_answers[1]",
    ),
    (
        "answers empty",
        {"id": "b", "question": "q", "golden_answers": ["", " "]},
        "empty_answer",
        "golden_answers",
    ),
    (
        "metadata a list",
        {"id": "b", "question": "q", "golden_answers": ["a"], "metadata": []},
        "wrong_type",
        "metadata",
    ),
    ("id reused", {"id": "test_0", "question": "another", "golden_answers": ["a"]}, "conflicting_id", "id"),
]


@pytest.mark.parametrize(("what", "record", "kind", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_record_is_located(tmp_path, what, record, kind, field):
    path = _write(tmp_path / "nq" / "test.jsonl", [GOOD[0], record, GOOD[2]])
    with pytest.raises(DataError) as e:
        load_flashrag(path)
    err = e.value
    assert err.kind == kind and err.path == str(path) and err.record.startswith("line 2")
    assert err.field == field and str(path) in str(err) and "line 2" in str(err)
    s = load_flashrag(path, on_error="skip")
    assert [r["id"] for r in s.rows] == ["test_0", "2"] and dict(s.report.counts) == {kind: 1}


def test_bad_json_line_and_empty_file(tmp_path):
    path = _write(tmp_path / "popqa" / "test.jsonl", GOOD[:2], ['{"id": "t", "question": "q", "golden_'])
    with pytest.raises(DataError) as e:
        load_flashrag(path)
    assert e.value.kind == "invalid_json" and "line 3" in str(e.value)
    assert len(load_flashrag(path, on_error="skip").rows) == 2
    empty = tmp_path / "nq" / "dev.jsonl"
    empty.parent.mkdir()
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        load_flashrag(empty)
    release = _write(tmp_path / "musique" / "train.jsonl", [json.loads(MUSIQUE_TRAIN.open().readline())])
    with pytest.raises(WrongDatasetError, match="release file"):
        load_flashrag(release)


def test_closed_context_build_refuses_flashrag(tmp_path):
    path = _write(tmp_path / "nq" / "test.jsonl", GOOD)
    with pytest.raises(WrongDatasetError, match="FlashRAG's question layout"):
        next(iter(load_examples("musique", path)))
    with pytest.raises(WrongDatasetError, match="evaluation only"):
        sniff_dataset(path)
    for name in ("flashrag", "nq", "Bamboogle"):
        with pytest.raises(UsageError, match="evaluation only"):
            get_loader(name)
    r = runner.invoke(
        app,
        [
            "build",
            "--dataset",
            "musique",
            "--input",
            str(path),
            "--setting",
            "ideal",
            "--n",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert (
        r.exit_code == 1
        and "FlashRAG's question layout" in r.output
        and "curriculum eval --agent" in r.output
    )
    assert "Traceback" not in r.output
    r = runner.invoke(
        app, ["build", "--dataset", "nq", "--input", str(path), "--out", str(tmp_path / "out2")]
    )
    assert r.exit_code == 2 and "evaluation only" in r.output and "Traceback" not in r.output


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    pytest.importorskip("bm25s")
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("flashrag-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=10))
    return out


@pytest.mark.slow
def test_eval_agent_on_a_flashrag_file(index_dir, tmp_path):
    """Real MuSiQue questions written in FlashRAG's layout, asked through `eval --agent` (Search-R1 and ReAct):
    EM / F1 over golden_answers, recomputed; no gold recall (there is no gold); a bad file is one located error."""
    from rag_curriculum._metrics import answer_scores

    recs = [json.loads(line) for line in MUSIQUE_TRAIN.read_text(encoding="utf-8").splitlines()[:6]]
    flash = [
        {
            "id": r["id"],
            "question": r["question"],
            "golden_answers": [r["answer"], *r["answer_aliases"]],
            "metadata": {"answerable": True},
        }
        for r in recs
    ]
    path = _write(tmp_path / "FlashRAG_datasets" / "musique" / "dev.jsonl", flash)
    for agent, policy in (("search-r1", "search_then_answer"), ("react", "react_search_then_finish")):
        out = tmp_path / agent
        r = runner.invoke(
            app,
            [
                "eval",
                "--agent",
                agent,
                "--retriever",
                str(index_dir),
                "--backend",
                "scripted",
                "--model",
                f"p=support.agent_policies:{policy}",
                "--data",
                str(path),
                "--max-turns",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ],
            catch_exceptions=False,
        )
        assert r.exit_code == 0, r.output
        (entry,) = json.loads((out / "summary.json").read_text())["evals"]
        assert (
            entry["dataset"] == "musique" and entry["set"] == "musique-dev.jsonl" and entry["questions"] == 6
        )
        assert entry["gold_passages"] is False and "gold_recall" not in entry["overall"]
        trajs = [json.loads(line) for line in (out / "trajectories" / "p" / f"{entry['set']}.jsonl").open()]
        assert [t["row_id"] for t in trajs] == [f["id"] for f in flash]
        f1 = [
            answer_scores(t["answer"], f["golden_answers"])[1] if t["answer"] is not None else 0.0
            for t, f in zip(trajs, flash, strict=True)
        ]
        assert entry["overall"]["f1"] == pytest.approx(100 * sum(f1) / 6, abs=0.01)
        # the policies' searches: search-r1's leaves a search unclosed (never run) where len(question) % 3 == 0,
        # react's retries it after "Invalid action"
        runs = [len(f["question"].strip()) % 3 != 0 or agent == "react" for f in flash]
        assert entry["overall"]["searches"] == pytest.approx(sum(runs) / 6, abs=1e-3)
        assert "| - |" in (out / "table.md").read_text()  # the gold-recall column, empty
    bad = _write(
        tmp_path / "nq" / "test.jsonl", [GOOD[0], {"id": "x", "question": "q", "golden_answers": "a"}]
    )
    r = runner.invoke(
        app,
        [
            "eval",
            "--agent",
            "react",
            "--retriever",
            str(index_dir),
            "--backend",
            "scripted",
            "--model",
            "p=support.agent_policies:react_search_then_finish",
            "--data",
            str(bad),
            "--out",
            str(tmp_path / "bad"),
            "--no-progress",
        ],
    )
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert str(bad) in r.output and "line 2" in r.output and "golden_answers" in r.output
