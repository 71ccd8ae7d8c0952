"""The bad-input corpus: malformed files made at test time from the real samples in ../shared/data (all three
datasets; JSON list, JSONL and Parquet), each run through ``load_examples`` (raise and skip), ``curriculum
inspect`` (raise and skip) and ``curriculum build`` (raise and skip).

Asserted for every file: raise mode stops with one ``DataError`` (or whole-file error) of the expected kind that
names the file, the record (JSON-list index, JSONL line or Parquet row) and the field; the CLI exits 1 with one
``error:`` line saying the same. Under skip: the exact counts by kind, every good record kept (compared with the
ids of the clean file), ``inspect --on-error skip`` exits 0 with the same counts, and ``build --on-error skip``
writes exactly the good records and records the counts in its manifest.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer.main
import typer.testing
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum import DataError, WrongDatasetError, load_examples
from rag_curriculum.cli import app

N = 8  # records taken from each sample: small files, so the whole corpus (and each build) is quick
BAD = (2, 5)  # the records a record-level corruption damages

# ------------------------------------------------------------------ the clean bases, made from the real samples


def _read(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)[:N]
    return [json.loads(line) for line in text.splitlines()[:N]]


def _twowiki_hub(rec: dict) -> dict:
    return {"id": rec["_id"], "type": rec["type"], "question": rec["question"],
            "context": {"title": [t for t, _ in rec["context"]], "content": [s for _, s in rec["context"]]},
            "supporting_facts": {"title": [t for t, _ in rec["supporting_facts"]],
                                 "sent_id": [s for _, s in rec["supporting_facts"]]},
            "evidences": {"fact": [e[0] for e in rec["evidences"]], "relation": [e[1] for e in rec["evidences"]],
                          "entity": [e[2] for e in rec["evidences"]]},
            "answer": rec["answer"]}


SHAPES = {  # shape: (dataset, sample, short name, layouts)
    "hotpot_official": ("hotpotqa", HOTPOT_TRAIN, "hp", ("json", "jsonl")),
    "hotpot_hub": ("hotpotqa", HOTPOT_HUB, "hphub", ("jsonl", "parquet")),
    "musique": ("musique", MUSIQUE_TRAIN, "mq", ("jsonl", "json", "parquet")),
    "2wiki_official": ("2wikimultihopqa", TWOWIKI_TRAIN, "tw", ("json", "jsonl")),
    "2wiki_hub": ("2wikimultihopqa", TWOWIKI_TRAIN, "twhub", ("parquet", "jsonl")),
}
_SAMPLES: dict[str, list[dict]] = {}


def base_records(shape: str) -> list[dict]:
    if shape not in _SAMPLES:
        recs = _read(SHAPES[shape][1])
        _SAMPLES[shape] = [_twowiki_hub(r) for r in recs] if shape == "2wiki_hub" else recs
    return copy.deepcopy(_SAMPLES[shape])


def id_key(shape: str) -> str:
    return "_id" if shape.endswith("official") else "id"


def pieces_of(records: list[Any]) -> list[bytes]:
    return [json.dumps(r, ensure_ascii=False).encode("utf-8") for r in records]


def join(pieces: list[bytes], layout: str, sep: list[bytes] | None = None) -> bytes:
    if layout == "jsonl":
        return b"".join(p + b"\n" for p in pieces)
    seps = sep or [b", "] * (len(pieces) - 1)
    return b"[" + b"".join(p + (seps[i] if i < len(seps) else b"") for i, p in enumerate(pieces)) + b"]"


def write_records(path: Path, records: list[Any], layout: str) -> None:
    if layout == "parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        path.write_bytes(join(pieces_of(records), layout))


def where(layout: str, pos: int) -> str:
    return {"json": f"index {pos}", "jsonl": f"line {pos + 1}", "parquet": f"row {pos}"}[layout]


# ------------------------------------------------------------------ record-level corruptions (every layout)


def _context_sentences(rec: dict) -> list:
    ctx = rec["context"]
    return ctx["sentences" if "sentences" in ctx else "content"] if isinstance(ctx, dict) else [s for _, s in ctx]


def m_missing_question(rec, shape):
    del rec["question"]


def m_null_answer(rec, shape):
    rec["answer"] = None


def m_int_answer(rec, shape):
    rec["answer"] = 42


def m_empty_answer(rec, shape):
    rec["answer"] = "  "


def m_empty_question(rec, shape):
    rec["question"] = ""


def m_null_sentence(rec, shape):
    if shape == "musique":
        rec["paragraphs"][1]["paragraph_text"] = None
    else:
        _context_sentences(rec)[1][0] = None


def m_dangling_fact(rec, shape):
    if shape == "musique":
        rec["question_decomposition"][0]["paragraph_support_idx"] = 99
    elif isinstance(rec["supporting_facts"], dict):
        rec["supporting_facts"]["title"][0] = "No Such Title"
    else:
        rec["supporting_facts"][0][0] = "No Such Title"


def m_no_gold(rec, shape):
    if shape == "musique":
        for p in rec["paragraphs"]:
            p["is_supporting"] = False
    elif isinstance(rec["supporting_facts"], dict):
        rec["supporting_facts"] = {"title": [], "sent_id": []}
    else:
        rec["supporting_facts"] = []


def m_bad_fact(rec, shape):
    if shape == "musique":
        rec["paragraphs"][0]["is_supporting"] = None
    elif isinstance(rec["supporting_facts"], dict):
        rec["supporting_facts"]["sent_id"][0] = None
    else:
        rec["supporting_facts"][0] = [None, 0]  # shown as [null, 0]: nothing in it may read as console markup


def _facts_field(shape: str) -> str:
    return {"musique": "question_decomposition[0].paragraph_support_idx"}.get(shape, "supporting_facts")


RECORD_CORRUPTIONS: dict[str, tuple] = {  # name: (mutate, kind, field(shape), parquet kind or None if n/a)
    "missing_question": (m_missing_question, "missing_field", lambda s: "question", "wrong_type"),
    "null_answer": (m_null_answer, "wrong_type", lambda s: "answer", "wrong_type"),
    "int_answer": (m_int_answer, "wrong_type", lambda s: "answer", None),
    "empty_answer": (m_empty_answer, "empty_answer", lambda s: "answer", "empty_answer"),
    "empty_question": (m_empty_question, "empty_question", lambda s: "question", "empty_question"),
    "null_sentence": (m_null_sentence, "wrong_type",
                      lambda s: "paragraphs[1].paragraph_text" if s == "musique" else "context[1].sentences",
                      "wrong_type"),
    "dangling_fact": (m_dangling_fact, "dangling_supporting_fact", _facts_field, "dangling_supporting_fact"),
    "no_gold": (m_no_gold, "no_gold", lambda s: "paragraphs" if s == "musique" else "supporting_facts", "no_gold"),
    "bad_fact": (m_bad_fact, "wrong_type",
                 lambda s: "paragraphs[0].is_supporting" if s == "musique" else "supporting_facts[0]", "wrong_type"),
}

# ------------------------------------------------------------------ text-level corruptions (JSON list and JSONL)

_ANSWER = re.compile(rb'"answer": "(?:[^"\\]|\\.)*"')


def t_bad_utf8(p):
    for i in BAD:
        p[i] = p[i].replace(b'"question": "', b'"question": "\xff\xfe', 1)
    return p, list(BAD), "invalid_utf8", "question"


def _last_answer(piece: bytes, value: bytes) -> bytes:
    m = list(_ANSWER.finditer(piece))[-1]  # the record's own answer (MuSiQue's sub-questions have answers first)
    return piece[:m.start()] + b'"answer": ' + value + piece[m.end():]


def t_nan(p):
    p[2] = _last_answer(p[2], b"NaN")
    p[5] = _last_answer(p[5], b"-Infinity")
    return p, [2, 5], "invalid_json", "answer"


def t_lone_surrogate(p):
    p[2] = p[2].replace(b'"question": "', b'"question": "\\ud800', 1)
    return p, [2], "invalid_json", "question"


def t_deep(p):
    p[3] = p[3][:1] + b'"deep": ' + b"[" * 3000 + b"]" * 3000 + b", " + p[3][1:]
    return p, [3], "invalid_json", None


def t_broken_syntax(p):
    p[4] = p[4].replace(b'"question": ', b'"question" ', 1)
    return p, [4], "invalid_json", None


def t_not_an_object(p):
    p[4] = b"7"
    return p, [4], "wrong_type", None


TEXT_CORRUPTIONS = {  # name: edit of the per-record JSON texts -> (pieces, bad positions, kind, field)
    "bad_utf8": t_bad_utf8, "nan_infinity": t_nan, "lone_surrogate": t_lone_surrogate, "deep_nesting": t_deep,
    "broken_syntax": t_broken_syntax, "not_an_object": t_not_an_object,
}

# ------------------------------------------------------------------ the cases


@dataclass
class Case:
    name: str
    dataset: str
    shape: str
    layout: str
    kind: str | None = None  # the kind raise mode reports (None: the file is fine)
    field: str | None = None
    locator: str | None = None  # where raise mode's error points
    counts: dict[str, int] = dc_field(default_factory=dict)  # skip mode's report
    bad: list[int] = dc_field(default_factory=list)  # positions (in the clean base) lost under skip
    extra_ids: list[int] = dc_field(default_factory=list)  # positions loaded a second time (exact duplicates)
    whole_file: type | None = None  # an error no record-skipping can get past
    message: str | None = None  # a fragment the error must carry
    build: dict[str, Any] = dc_field(default_factory=dict)  # manifest facts: excluded
    make: Any = None  # (case, path) -> None

    @property
    def file_name(self) -> str:
        ext = {"json": "json", "jsonl": "jsonl", "parquet": "parquet", "dir": "d"}.get(self.layout, self.layout)
        return f"{SHAPES[self.shape][2]}-{self.layout}-{self.name}-train.{ext}"


def _record_case(name: str, shape: str, layout: str) -> Case | None:
    mutate, kind, fld, pq_kind = RECORD_CORRUPTIONS[name]
    if layout == "parquet":
        if pq_kind is None:
            return None
        kind = pq_kind

    def make(case: Case, path: Path) -> None:
        recs = base_records(shape)
        for i in BAD:
            mutate(recs[i], shape)
        write_records(path, recs, layout)

    return Case(name, SHAPES[shape][0], shape, layout, kind=kind, field=fld(shape), locator=where(layout, BAD[0]),
                counts={kind: len(BAD)}, bad=list(BAD), make=make)


def _text_case(name: str, shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        pieces, *_ = TEXT_CORRUPTIONS[name](pieces_of(base_records(shape)))
        path.write_bytes(join(pieces, layout))

    _, bad, kind, fld = TEXT_CORRUPTIONS[name](pieces_of(base_records(shape)))
    return Case(name, SHAPES[shape][0], shape, layout, kind=kind, field=fld, locator=where(layout, bad[0]),
                counts={kind: len(bad)}, bad=bad, make=make)


def _conflicting_id(shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        recs = base_records(shape)
        recs[5][id_key(shape)] = recs[1][id_key(shape)]
        write_records(path, recs, layout)

    return Case("conflicting_id", SHAPES[shape][0], shape, layout, kind="conflicting_id", field=id_key(shape),
                locator=where(layout, 5), counts={"conflicting_id": 1}, bad=[5], make=make,
                message=f"already used by {where(layout, 1)}")


def _string_sentences(shape: str, layout: str) -> Case:
    """A paragraph whose sentences are one string (its characters were read as sentences)."""
    def make(case: Case, path: Path) -> None:
        recs = base_records(shape)
        for i in BAD:
            ctx = recs[i]["context"]
            if isinstance(ctx, dict):
                key = "sentences" if "sentences" in ctx else "content"
                ctx[key][1] = "".join(ctx[key][1])
            else:
                ctx[1][1] = "".join(ctx[1][1])
        write_records(path, recs, layout)

    return Case("string_sentences", SHAPES[shape][0], shape, layout, kind="wrong_type", field="context[1].sentences",
                locator=where(layout, BAD[0]), counts={"wrong_type": len(BAD)}, bad=list(BAD), make=make,
                message="expected a list of sentence strings, got a string")


def _duplicate(shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        recs = base_records(shape)
        write_records(path, [*recs, copy.deepcopy(recs[3])], layout)

    return Case("exact_duplicate", SHAPES[shape][0], shape, layout, extra_ids=[3], make=make,
                build={"excluded": {"duplicate_id": 1}})


def _bom(shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        path.write_bytes(b"\xef\xbb\xbf" + join(pieces_of(base_records(shape)), layout))

    return Case("bom", SHAPES[shape][0], shape, layout, make=make)


def _truncated(shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        pieces = pieces_of(base_records(shape))
        data = join(pieces, layout)
        cut = len(join(pieces[:5], layout)) - (1 if layout == "json" else 0) + len(pieces[5]) // 2
        path.write_bytes(data[:cut])

    return Case("truncated", SHAPES[shape][0], shape, layout, kind="invalid_json", locator=where(layout, 5),
                counts={"invalid_json": 1}, bad=[5, 6, 7], make=make, message="truncated")


def _trailing(shape: str, layout: str) -> Case:
    def make(case: Case, path: Path) -> None:
        path.write_bytes(join(pieces_of(base_records(shape)), layout) + (b"\n" if layout == "json" else b"")
                         + b"}} garbage\n")

    return Case("trailing_garbage", SHAPES[shape][0], shape, layout, kind="invalid_json",
                locator="after index 7" if layout == "json" else "line 9", counts={"invalid_json": 1}, make=make)


def _missing_comma(shape: str) -> Case:
    def make(case: Case, path: Path) -> None:
        seps = [b", "] * (N - 1)
        seps[3] = b" "
        path.write_bytes(join(pieces_of(base_records(shape)), "json", seps))

    return Case("missing_comma", SHAPES[shape][0], shape, "json", kind="invalid_json", locator="after index 3",
                counts={"invalid_json": 1}, make=make, message="expected ',' or ']'")


def _whole_file(name: str, shape: str, layout: str, error: type, message: str, content: Any) -> Case:
    def make(case: Case, path: Path) -> None:
        if content == "dir":
            path.mkdir()
            (path / "inner.json").write_text("[]")
        elif callable(content):
            content(path)
        else:
            path.write_bytes(content)

    return Case(name, SHAPES[shape][0], shape, layout, whole_file=error, message=message, make=make)


def _corrupt_parquet(path: Path) -> None:
    write_records(path, base_records("musique"), "parquet")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _other_dataset(path: Path) -> None:
    write_records(path, base_records("musique"), "jsonl")


def cases() -> list[Case]:
    out: list[Case] = []
    for shape, (_, _, _, layouts) in SHAPES.items():
        # every record-level corruption in every shape; the layout turns round, so each shape meets its layouts
        for k, name in enumerate(RECORD_CORRUPTIONS):
            case = _record_case(name, shape, layouts[k % len(layouts)])
            if case is None:  # not representable in Parquet (a column has one type): the next layout
                case = _record_case(name, shape, layouts[(k + 1) % len(layouts)])
            out.append(case)
        out.append(_conflicting_id(shape, layouts[-1]))
    for s, shape in enumerate(("hotpot_official", "musique", "2wiki_official")):
        text_layouts = ("json", "jsonl")
        for k, name in enumerate(TEXT_CORRUPTIONS):
            out.append(_text_case(name, shape, text_layouts[(k + s) % 2]))
        out += [_truncated(shape, "json"), _truncated(shape, "jsonl"), _trailing(shape, "json"),
                _trailing(shape, "jsonl"), _missing_comma(shape), _bom(shape, text_layouts[s % 2])]
    out += [_duplicate("hotpot_hub", "parquet"), _duplicate("musique", "json"), _duplicate("2wiki_official", "jsonl")]
    out += [_string_sentences("hotpot_official", "json"), _string_sentences("hotpot_hub", "jsonl"),
            _string_sentences("2wiki_official", "jsonl")]
    out += [
        _whole_file("empty", "hotpot_official", "json", DataError, "the file is empty", b""),
        _whole_file("whitespace", "musique", "jsonl", DataError, "the file is empty", b"\n \n\t\n"),
        _whole_file("not_json", "2wiki_official", "json", DataError, "not JSON, JSON Lines or Parquet",
                    b"id,question,answer\n1,a,b\n"),
        _whole_file("directory", "hotpot_official", "dir", IsADirectoryError, "is a directory", "dir"),
        _whole_file("corrupt_parquet", "musique", "parquet", DataError, "unreadable Parquet file", _corrupt_parquet),
        _whole_file("other_dataset", "hotpot_official", "jsonl", WrongDatasetError,
                    "looks like a 'musique' file, not 'hotpotqa'", _other_dataset),
        _whole_file("empty_list", "2wiki_official", "json", None, "no records", b"[]"),
    ]
    names = [c.file_name for c in out]
    assert len(names) == len(set(names)), "case names must be unique"
    return out


CASES = cases()


def test_the_corpus_is_big_and_covers_every_dataset_and_layout():
    assert len(CASES) >= 60
    assert {c.dataset for c in CASES} == {"hotpotqa", "musique", "2wikimultihopqa"}
    for dataset in ("hotpotqa", "musique", "2wikimultihopqa"):
        assert {c.layout for c in CASES if c.dataset == dataset} >= {"json", "jsonl", "parquet"}
    kinds = {c.kind for c in CASES}
    assert kinds >= {"invalid_json", "invalid_utf8", "missing_field", "wrong_type", "empty_answer",
                     "empty_question", "no_gold", "dangling_supporting_fact", "conflicting_id"}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad-inputs")


_CLEAN_IDS: dict[tuple[str, str], list[str]] = {}


def clean_ids(case: Case, corpus: Path) -> list[str]:
    """The ids of the clean base in the case's layout, as the loaders read them."""
    key = (case.shape, case.layout)
    if key not in _CLEAN_IDS:
        path = corpus / f"clean-{case.shape}.{case.layout}"
        write_records(path, base_records(case.shape), case.layout)
        ids = [e.id for e in load_examples(case.dataset, path, split="train")]
        assert len(ids) == N
        _CLEAN_IDS[key] = ids
    return _CLEAN_IDS[key]


def made(case: Case, corpus: Path) -> Path:
    path = corpus / case.file_name
    if not path.exists():
        case.make(case, path)
    return path


@pytest.fixture(scope="module")
def cli(monkeypatch_module):
    """``curriculum`` in process: the click command is made once (typer makes it on every invoke otherwise)."""
    command = typer.main.get_command(app)
    monkeypatch_module.setattr(typer.testing, "_get_command", lambda _app: command)
    # the data card's level plot (matplotlib) would be most of each small build's time, and is not what is tested
    import rag_curriculum.cards as card

    monkeypatch_module.setattr(card, "plot_levels", lambda levels, path, **kw: Path(path).write_bytes(b""),
                               raising=False)
    runner = typer.testing.CliRunner()

    def run(*args: Any):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return run


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def expected_ids(case: Case, corpus: Path) -> list[str]:
    ids = clean_ids(case, corpus)
    return [x for i, x in enumerate(ids) if i not in case.bad] + [ids[i] for i in case.extra_ids]


def assert_located(message: str, case: Case, path: Path) -> None:
    assert "\n" not in message, message
    assert path.name in message, message
    if case.locator:
        assert re.search(rf"\b{re.escape(case.locator)}\b", message), (case.locator, message)
    if case.field:
        assert f"field {case.field!r}" in message, (case.field, message)
    if case.message:
        assert case.message in message, message


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("case", CASES, ids=[c.file_name for c in CASES])
def test_load_examples_raise_and_skip(case, corpus, caplog):
    path = made(case, corpus)
    if case.whole_file is not None or case.message == "no records":
        for on_error in ("raise", "skip"):
            if case.whole_file is None:  # an empty list: no records, no error
                assert list(load_examples(case.dataset, path, on_error=on_error)) == []
                continue
            with pytest.raises(case.whole_file) as ei:
                list(load_examples(case.dataset, path, on_error=on_error))
            assert path.name in str(ei.value) and case.message in str(ei.value)
            assert "\n" not in str(ei.value)
        return
    if case.kind is None:
        assert [e.id for e in load_examples(case.dataset, path)] == expected_ids(case, corpus)
    else:
        with pytest.raises(DataError) as ei:
            list(load_examples(case.dataset, path))
        assert ei.value.kind == case.kind, str(ei.value)
        assert_located(str(ei.value), case, path)
    stream = load_examples(case.dataset, path, on_error="skip")
    assert [e.id for e in stream] == expected_ids(case, corpus)
    assert dict(stream.report.counts) == case.counts
    assert stream.duplicates == len(case.extra_ids)
    for messages in stream.report.examples.values():
        for m in messages:
            assert "\n" not in m and path.name in m


def _error_line(result) -> str:
    assert "Traceback" not in result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    assert len(errors) == 1, result.stderr
    i = lines.index(errors[0])
    assert all(x.startswith(("hint:", "WARNING", "INFO")) for x in lines[i + 1:]), "the error is one line: " + \
        result.stderr
    return errors[0][len("error: "):]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.file_name for c in CASES])
def test_cli_inspect_and_build(case, corpus, cli, monkeypatch):
    path = made(case, corpus)
    monkeypatch.chdir(corpus)  # relative paths: short, one-line messages
    name = path.name
    out = f"out-{name}"
    skip = ("--on-error", "skip")
    if case.whole_file is not None or case.message == "no records":
        for on_error in ("raise", "skip"):
            r = cli("inspect", name, "--dataset", case.dataset, "--on-error", on_error, "--json")
            if case.whole_file is None:
                assert r.exit_code == 0 and json.loads(r.stdout)["records"] == 0
            else:
                assert r.exit_code == 1
                line = _error_line(r)
                assert name in line and case.message in line, line
                if on_error == "skip":
                    assert "--on-error skip" not in r.stderr, "the hint must not ask for the flag already given"
            r = cli("build", "-d", case.dataset, "-i", name, "-o", out, "--n", "all", "--on-error", on_error)
            assert r.exit_code == 1
            line = _error_line(r)
            assert name in line, line  # an empty list too: "the build produced no rows: FILE (...): 0 usable ..."
            # A fault of the whole file is not helped by skipping records
            assert "pass --on-error skip" not in r.stderr, r.stderr
        return
    # raise mode: exit 1, one located line, printed exactly as the library says it (nothing in it taken for
    # console markup, as "[title, sentence index]" or "[null, 0]" once were); or, for a clean file, a summary
    r = cli("inspect", name, "--dataset", case.dataset)
    if case.kind is None:
        assert r.exit_code == 0, r.output
    else:
        with pytest.raises(DataError) as ei:
            list(load_examples(case.dataset, name))
        assert r.exit_code == 1, r.output
        assert _error_line(r) == str(ei.value)
        assert_located(str(ei.value), case, path)
        # A file cut short is got again, not skipped past (skip reads only what precedes the cut)
        hint = "get the whole file again" if case.name == "truncated" else "pass --on-error skip"
        assert hint in r.stderr, r.stderr
        r = cli("build", "-d", case.dataset, "-i", name, "-o", out, "--n", "all")
        assert r.exit_code == 1
        assert _error_line(r) == str(ei.value)
        assert hint in r.stderr and ("pass --on-error skip" in r.stderr) == (case.name != "truncated"), r.stderr
        assert not (corpus / out).exists()
    # skip mode: inspect counts exactly what load_examples skipped, and build writes every good record
    r = cli("inspect", name, "--json", *skip)  # the dataset sniffed, past the damaged records
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["dataset"] == case.dataset
    assert summary["skipped"] == case.counts
    assert summary["records"] == N - len(case.bad) + len(case.extra_ids)
    assert summary["duplicate_records"] == len(case.extra_ids)
    r = cli("build", "-d", case.dataset, "-i", name, "-o", out, "--n", "all", *skip)
    assert r.exit_code == 0, r.output
    manifest = json.loads(next((corpus / out).rglob("manifest.json")).read_text())
    (source,) = manifest["sources"]
    assert source["skipped"] == case.counts
    assert source["excluded"] == case.build.get("excluded", {})
    from rag_curriculum.shards import read_table

    rows = read_table(corpus / out, columns=["extra_info"]).column("extra_info").to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(set(expected_ids(case, corpus)))
    assert manifest["num_rows"] == len(rows)
