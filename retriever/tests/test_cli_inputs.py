"""``rag-retriever`` alone, as safe as ``curriculum``: a corpus that is missing, a folder, empty, binary or not
JSONL is one error about the corpus before any engine is imported; a Search-R1 corpus with a byte-order mark gets
Lucene's preset as one without; its hints name its own commands and extras; a busy port is one line."""

from __future__ import annotations

import socket
import sys

import pytest
from click.testing import CliRunner

from rag_retriever._bm25 import search_r1_corpus
from rag_retriever.cli import main

LINE = '{"id": "0", "contents": "\\"T\\"\\nsome text"}\n'


def _invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error(r, code: int) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    assert "Traceback" not in r.output, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    return errors[0]


@pytest.mark.parametrize("what, said", [
    ("missing", "missing.jsonl: no such file"),
    ("folder", "folder: a directory, not a file"),
    ("empty", "empty.jsonl: no passage"),
    ("binary", "binary.jsonl, line 1: not UTF-8"),
    ("malformed", "malformed.jsonl, line 1: not JSON"),
])
def test_a_bad_corpus_is_said_before_the_engine_is_imported(tmp_path, monkeypatch, what, said):
    paths = {"missing": tmp_path / "missing.jsonl", "folder": tmp_path / "folder",
             "empty": tmp_path / "empty.jsonl", "binary": tmp_path / "binary.jsonl",
             "malformed": tmp_path / "malformed.jsonl"}
    paths["folder"].mkdir()
    paths["empty"].write_bytes(b"\n\n")
    paths["binary"].write_bytes(bytes(range(200, 256)) * 4)
    paths["malformed"].write_text('{"title": "x"\n')
    monkeypatch.setitem(sys.modules, "bm25s", None)  # as without the [fast] extra: importing it fails
    line = _one_error(_invoke("index", "--corpus", paths[what], "--out", tmp_path / "o", "--no-progress"), 1)
    assert said in line and "bm25s" not in line, line
    assert not (tmp_path / "o").exists()


def test_a_search_r1_corpus_with_a_byte_order_mark_gets_lucenes_preset(tmp_path):
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "marked.jsonl"
    plain.write_text(LINE, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + LINE.encode())
    assert search_r1_corpus(str(plain)) and search_r1_corpus(str(marked))


def test_hints_name_its_own_commands(tmp_path):
    r = _invoke("validate", tmp_path / "nothing")
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    assert "rag-retriever index" in r.output and "curriculum index" not in r.output, r.output


def test_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = _one_error(_invoke("serve", "--index", tmp_path, "--port", port), 2)
    assert f"cannot listen on 127.0.0.1:{port}" in line, line


PASSWORD, TOKEN = "PW-9x7Secret", "TOK-5q3Secret"
URL = f"http://u:{PASSWORD}@h.example/x?token={TOKEN}"


@pytest.mark.parametrize("args", [["index", "--corpus", URL, "--out", "o", "--no-progress"], ["validate", URL],
                                  ["serve", "--index", URL]])
def test_a_url_with_a_password_and_a_token_is_masked_in_every_command(args, tmp_path, monkeypatch):
    """As ``curriculum`` masks them (the plumbing's one rule, on every line the command prints)."""
    monkeypatch.chdir(tmp_path)
    r = _invoke(*args)
    line = _one_error(r, 1)
    assert PASSWORD not in r.output and TOKEN not in r.output, r.output
    assert line.startswith("error: http:/***@h.example/x?token=***: "), line
