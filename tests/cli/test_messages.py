"""One located line (exit 1, or 2 for a usage error) instead of a traceback or a misleading
message: --stats of a missing path, a truncated JSON or a missing module as the scripted --model, a script that
returns non-strings or raises, a plain folder given to partition, validate / inspect on an index or a damaged shard
directory, --out a file, an unknown --backend-arg."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app

SCRIPT = '''
def ok(messages, n, seed):
    return ["<think>t</think> Final answer: yes"] * n

def ints(messages, n, seed):
    return [1] * n

def few(messages, n, seed):
    return ["a"]

def number(messages, n, seed):
    return 3

def boom(messages, n, seed):
    raise ValueError("my bug in the script")
'''


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(r, code: int = 1) -> str:
    """The one ``error:`` line of a refused command (no traceback), after checking its exit status."""
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    return errors[0]


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("scripts")
    (d / "msg_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(d))
    yield "msg_script"
    sys.path.remove(str(d))
    sys.modules.pop("msg_script", None)


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("msg") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=2)], schedule="max",
                                 out=str(out), seed=0, rows_per_shard=2), command="t")
    return out


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("msg") / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 3)], setting="distractor",
                                 out=str(out), seed=0), command="t")
    return out


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("msg") / "idx"
    r = run("index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", out, "--depth", 5, "--no-progress")
    assert r.exit_code == 0, r.output
    return out


def partition(max_dir, out, model, *more):
    return run("partition", max_dir, "--backend", "scripted", "--model", model, "--pass-at", 2, "--no-progress",
               "-o", out, *more)


# -- misleading messages -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_stats_of_a_missing_path_says_it_is_missing(eval_dir, script, tmp_path):
    beside_work = tmp_path / "here"
    (beside_work / "work").mkdir(parents=True)  # a folder holding a "work" folder, as / holds /work on some machines
    for missing in (beside_work / "stats.parquet", tmp_path / "nowhere" / "stats.parquet"):
        r = run("eval", "--model", f"m={script}:ok", "--data", eval_dir, "--backend", "scripted", "--stats", missing,
                "--no-plots", "-o", tmp_path / "e")
        line = one_error(r)
        assert f"{missing}: no such file or directory" in line and "not all written" not in r.output, line
        assert "--stats takes a partition's stats.parquet" in r.output


@pytest.mark.slow
def test_a_truncated_json_script_is_named(max_dir, tmp_path):
    f = tmp_path / "script.json"
    f.write_text('{"a prompt": ["an ans')
    line = one_error(partition(max_dir, tmp_path / "p", f))
    assert str(f) in line and "not valid JSON" in line, line
    f.write_text("[1, 2]")
    line = one_error(partition(max_dir, tmp_path / "p2", f))
    assert str(f) in line and "holds a JSON list" in line, line


@pytest.mark.parametrize("fn, words", [
    ("ints", ["msg_script.ints returned non-strings (int)", "must be strings"]),
    ("number", ["msg_script.number returned a int", "a list of n=2 strings"]),
    ("few", ["msg_script.few returned 1 completion(s) where n=2 are needed"]),
])
def test_a_script_returning_what_is_not_completions_says_what_it_returned(max_dir, script, tmp_path, fn, words):
    line = one_error(partition(max_dir, tmp_path / "p", f"{script}:{fn}"))
    for w in words:
        assert w in line, (w, line)
    assert "gave" not in line


def test_a_missing_script_module_is_not_an_install_hint(max_dir, tmp_path):
    r = partition(max_dir, tmp_path / "p", "nosuchmod:fn")
    line = one_error(r, code=2)
    assert "no module named 'nosuchmod'" in line and "rag-curriculum[train]" not in r.output, r.output
    assert "PYTHONPATH" in r.output


def test_partition_of_a_plain_folder_says_it_is_not_a_shard_directory(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("x")
    line = one_error(partition(plain, tmp_path / "p", "x.json"))
    assert "not a shard directory (no manifest.json)" in line and "did not finish" not in line, line


@pytest.mark.slow
def test_validate_checks_an_index(index_dir, tmp_path):
    import shutil

    r = run("validate", index_dir)
    assert r.exit_code == 0 and "valid" in r.output and "BM25 index" in r.output, r.output
    assert "schema_version" not in r.output
    broken = tmp_path / "idx"
    shutil.copytree(index_dir, broken)
    (broken / "passages.bin").write_bytes(b"cut")
    line = one_error(run("validate", broken))
    assert "passages.bin: 3 bytes, manifest.json records" in line and "schema_version" not in line, line


@pytest.mark.parametrize("command", ["eval", "partition", "build", "index"])
def test_out_a_file_says_so(max_dir, eval_dir, script, tmp_path, command):
    f = tmp_path / "f"
    f.write_text("mine")
    args = {"eval": ["eval", "--model", f"m={script}:ok", "--data", eval_dir, "--backend", "scripted", "--no-plots"],
            "partition": ["partition", max_dir, "--backend", "scripted", "--model", f"{script}:ok", "--no-progress"],
            "build": ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 3, "--no-progress"],
            "index": ["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "--no-progress"]}[command]
    for out in (f, f / "sub"):
        r = run(*args, "-o", out)
        line = one_error(r)
        assert "File exists" not in line and "Not a directory" not in line, line
        assert str(f) in line and "file" in line, line
    assert f.read_text() == "mine"


# -- tracebacks -> one line --------------------------------------------------------------------------------
@pytest.mark.slow
def test_inspect_a_damaged_shard_directory_names_what_is_wrong(max_dir, index_dir, tmp_path):
    import shutil

    truncated = tmp_path / "truncated"
    shutil.copytree(max_dir, truncated)
    shard = sorted((truncated / "data").glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    line = one_error(run("inspect", truncated))
    assert f"data/{shard.name}" in line, line
    for bad, words in (("{\"kind\": ", "invalid JSON"), ("[1, 2]", "a JSON list, not a manifest"),
                       ("{\"kind\": \"mine\"}", "not a shard manifest of this toolkit")):
        d = tmp_path / f"bad{len(words)}"
        shutil.copytree(max_dir, d)
        (d / "manifest.json").write_text(bad)
        line = one_error(run("inspect", d))
        assert "manifest.json" in line and words in line, line
    line = one_error(run("inspect", index_dir))
    assert "is an index" in line, line


@pytest.mark.parametrize("command", ["partition", "eval"])
def test_an_unknown_backend_arg_is_one_line_with_did_you_mean(max_dir, eval_dir, script, tmp_path, command):
    args = (["partition", max_dir, "--model", f"{script}:ok"] if command == "partition" else
            ["eval", "--model", f"m={script}:ok", "--data", eval_dir, "--no-plots"])
    r = run(*args, "--backend", "scripted", "--backend-arg", "nosuch=1", "--backend-arg", "delai=0", "-o",
            tmp_path / "o")
    line = one_error(r, code=2)
    assert "the scripted backend has no option 'nosuch'" in line, line
    assert "its options: default, delay, script" in r.output
    r = run(*args, "--backend", "scripted", "--backend-arg", "delai=0", "-o", tmp_path / "o")
    assert "did you mean 'delay'?" in one_error(r, code=2)
    assert not (tmp_path / "o").exists()


def test_a_missing_attribute_of_the_script_module_is_one_line(max_dir, script, tmp_path):
    line = one_error(partition(max_dir, tmp_path / "p", f"{script}:nosuch"), code=2)
    assert "msg_script has no attribute 'nosuch'" in line, line
    line = one_error(partition(max_dir, tmp_path / "p2", f"{script}:bom"), code=2)
    assert "did you mean 'boom'?" in line, line


def test_an_exception_in_the_users_script_names_the_function_and_its_error(max_dir, eval_dir, script, tmp_path):
    line = one_error(partition(max_dir, tmp_path / "p", f"{script}:boom"))
    assert "the script msg_script.boom raised ValueError: my bug in the script" in line, line
    r = run("eval", "--model", f"m={script}:boom", "--data", eval_dir, "--backend", "scripted", "--no-plots", "-o",
            tmp_path / "e")
    assert "the script msg_script.boom raised ValueError: my bug in the script" in one_error(r)


def test_the_scripted_backend_still_raises_what_library_callers_catch():
    from rag_curriculum.errors import CurriculumError, PromptTooLongError
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._scripted import ScriptedBackend

    with pytest.raises(TypeError):
        ScriptedBackend(script=42)

    def too_long(messages, n, seed):
        raise PromptTooLongError([0])

    with pytest.raises(PromptTooLongError):  # the toolkit's own errors pass through unchanged
        ScriptedBackend(script=too_long).generate([[{"role": "user", "content": "q"}]], SamplingConfig(n=1))
    with pytest.raises(CurriculumError, match="returned non-strings"):
        ScriptedBackend(script=lambda m, n, s: [json] * n).generate([[{"role": "user", "content": "q"}]],
                                                                    SamplingConfig(n=1))


@pytest.mark.parametrize("missing, words, not_words", [
    ("transformers", ["pip install 'rag-curriculum[train]'"], []),
    ("bm25s", ["pip install 'rag-curriculum[retrieval]'"], []),
    ("nosuchmod", ["install nosuchmod", "check the name"], ["rag-curriculum[train]"]),
])
def test_a_missing_module_gets_the_extra_that_has_it_or_none(missing, words, not_words):
    import typer

    from rag_curriculum._cli.common import reported_errors

    demo = typer.Typer()

    @demo.command()
    def go() -> None:
        with reported_errors():
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    @demo.command()
    def other() -> None:
        pass

    r = CliRunner().invoke(demo, ["go"])
    assert f"No module named '{missing}'" in one_error(r)
    for w in words:
        assert w in r.output, (w, r.output)
    for w in not_words:
        assert w not in r.output, (w, r.output)
