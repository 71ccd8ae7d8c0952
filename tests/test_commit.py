"""The commit protocol (rag_curriculum._commit), tested once, for every kind of output that uses it: a shard directory
(a build, a partition's bucket), an index and a warm start's model folder are each written in a hidden partial folder
beside the target and moved in whole; refused when the target is a file, or holds files without --overwrite, or is
not the toolkit's (of that kind) with it; replaced whole, or in place keeping a user's files; a dead writer's
partial folder removed by the next run and a live one's kept; one writer at a time. The resumable outputs (a
partition's and an evaluation's --out) share the refusal and one-writer rules. The commands' own tests (build,
partition, index, warm-start, eval) check that each command goes through these rules."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rag_retriever._index import OUTPUT as INDEX
from rag_retriever._index import IndexError_

from rag_curriculum import _commit
from rag_curriculum._commit import (
    SHARDS,
    check_output,
    check_resumable,
    commit_output,
    exclusive,
    lock_beside,
    owner_tag,
    prepare_output,
    resumable_output,
)
from rag_curriculum.errors import ConfigError, EvalError, ShardError
from rag_curriculum.train._warm import OUTPUT as WARM


def _shards_record(files: list[str], tag: str = "1") -> dict:
    return {"toolkit": {"name": "rag-curriculum"}, "kind": "curriculum", "schema_version": 1,
            "shards": [{"file": f, "sha256": _sha(tag)} for f in files if f.startswith("data/")],
            "files": [f for f in files if not f.startswith("data/")],
            "file_sha256": {f: _sha(tag) for f in files if not f.startswith("data/")}}


def _sha(tag: str) -> str:
    """The SHA-256 of a file holding ``tag``, as each kind's writer records it."""
    return hashlib.sha256(tag.encode()).hexdigest()


#: Each kind of committed output: its protocol description, the record it writes, and a record of another kind.
KINDS = {
    "shards": (SHARDS, ShardError, _shards_record, {"name": "My App", "icons": []}),
    "index": (INDEX, IndexError_, lambda files, tag="1": {"kind": "index", "format": 4,
                                                            "files": {f: {"sha256": _sha(tag)} for f in files}},
              _shards_record(["data/part-00000.parquet"])),
    "warm-start": (WARM, ConfigError, lambda files, tag="1": {"settings": {}, "files": files,
                                                              "file_sha256": {f: _sha(tag) for f in files}},
                   {"settings": {}}),
}
FILES = {"shards": ["data/part-00000.parquet", "README.md"], "index": ["passages.arrow", "bm25/data.npy"],
         "warm-start": ["model.safetensors", "config.json"]}


@pytest.fixture(params=list(KINDS))
def kind(request):
    return request.param


def write(name: str, out: Path, tag: str = "1", *, overwrite: bool = False, files: list[str] | None = None) -> Path:
    """An output of kind ``name`` written through the protocol: its files (holding ``tag``), its record last."""
    spec, _, record, _ = KINDS[name]
    files = FILES[name] if files is None else files
    tmp = prepare_output(out, overwrite=overwrite, kind=spec)
    assert tmp.parent == out.parent and tmp.name.startswith(f".{out.name}.partial-")
    for f in files:
        (tmp / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp / f).write_text(tag)
    (tmp / spec.record).write_text(json.dumps(record(files, tag)))
    assert not out.exists() or overwrite  # nothing at the target before the commit
    commit_output(tmp, out, overwrite=overwrite, kind=spec)
    assert not tmp.exists()
    return out


def hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_an_output_is_written_beside_and_moved_in_whole(kind, tmp_path):
    out = write(kind, tmp_path / "sub" / "out")
    spec = KINDS[kind][0]
    assert sorted(_commit.files_under(out)) == sorted([*FILES[kind], spec.record])
    assert hidden(out.parent) == []


def test_refusals_name_the_output_and_change_nothing(kind, tmp_path):
    spec, error, _, other = KINDS[kind]
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(error, match="is a file, where a folder is needed"):
        check_output(a_file, overwrite=True, kind=spec)
    with pytest.raises(error, match=f"cannot create --out {a_file / 'out'}: {a_file} is a file"):
        check_output(a_file / "out", overwrite=False, kind=spec)
    out = write(kind, tmp_path / "out")
    with pytest.raises(error, match="already exists and is not empty; pass --overwrite"):
        check_output(out, overwrite=False, kind=spec)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(error, match=f"mine exists and is not {spec.what} \\(no {spec.record}\\); --overwrite only"):
        check_output(mine, overwrite=True, kind=spec)
    (mine / spec.record).write_text("{not json")
    with pytest.raises(error, match=f"holds a {spec.record} that cannot be read"):
        check_output(mine, overwrite=True, kind=spec)
    (mine / spec.record).write_text(json.dumps(other))
    with pytest.raises(error, match=f"holds a {spec.record} .*, so it is not {spec.what}"):
        prepare_output(mine, overwrite=True, kind=spec)
    assert (mine / "notes.txt").read_text() == "keep me" and hidden(tmp_path) == []


def test_overwrite_swaps_an_output_of_only_the_toolkits_files_whole(kind, tmp_path, caplog):
    out = write(kind, tmp_path / "out")
    with caplog.at_level(logging.WARNING):
        write(kind, out, "2", overwrite=True, files=FILES[kind][:1])
    assert not caplog.records
    assert sorted(_commit.files_under(out)) == sorted([FILES[kind][0], KINDS[kind][0].record])
    assert (out / FILES[kind][0]).read_text() == "2" and hidden(tmp_path) == []


def test_overwrite_keeps_a_users_files_and_replaces_the_toolkits_in_place(kind, tmp_path, caplog):
    spec = KINDS[kind][0]
    out = write(kind, tmp_path / "out")
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "a.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        write(kind, out, "2", overwrite=True, files=FILES[kind][:1])
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "a.json").read_text() == "{}"
    assert (out / FILES[kind][0]).read_text() == "2" and not (out / FILES[kind][1]).exists()  # the old one gone
    assert json.loads((out / spec.record).read_text()) == KINDS[kind][2](FILES[kind][:1], "2")
    assert any("kept 2 the toolkit did not write: mine/, notes.txt" in r.getMessage() for r in caplog.records)
    assert not (out / spec.replacing).exists() and hidden(tmp_path) == []


def test_an_overwrite_in_place_cut_short_is_recognised_and_finished_by_the_next(kind, tmp_path):
    spec = KINDS[kind][0]
    out = write(kind, tmp_path / "out")
    (out / "notes.txt").write_text("n")
    os.replace(out / spec.record, out / spec.replacing)  # killed just after moving the record aside
    with pytest.raises(KINDS[kind][1], match="already exists"):  # not complete, and still not replaced silently
        check_output(out, overwrite=False, kind=spec)
    write(kind, out, "2", overwrite=True)
    assert (out / "notes.txt").read_text() == "n" and (out / spec.record).is_file()
    assert not (out / spec.replacing).exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_out_that_is_a_symbolic_link_is_refused_and_nothing_is_left_beside_it(kind, tmp_path, overwrite):
    """``--out link`` (to an earlier output): refused in one line naming the link and its target, the link and the
    output it points to unchanged, no hidden folder or link left beside them."""
    spec, error, _, _ = KINDS[kind]
    real = write(kind, tmp_path / "real")
    before = {f: (real / f).read_text() for f in _commit.files_under(real)}
    (tmp_path / "link").symlink_to("real", target_is_directory=True)
    with pytest.raises(error, match=f"--out {tmp_path / 'link'} is a symbolic link \\(to real\\); give the folder "
                                    f"it points to \\(--out {real}\\) or another --out"):
        write(kind, tmp_path / "link", "2", overwrite=overwrite)
    assert (tmp_path / "link").is_symlink() and {f: (real / f).read_text() for f in before} == before
    assert hidden(tmp_path) == []


def _listing(kind: str, record: dict, names: list[str]) -> dict:
    """``record`` with ``names`` appended to the files it says the toolkit wrote (as a crafted record would)."""
    files, forged = record["files"], {n: _sha("1") for n in names}  # a digest: not the content of the user's file
    if isinstance(files, dict):
        return {**record, "files": {**files, **{n: {"sha256": d} for n, d in forged.items()}}}
    return {**record, "files": [*files, *names], "file_sha256": {**record["file_sha256"], **forged}}


@pytest.mark.parametrize("how", ["swapped whole", "in place"])
def test_a_crafted_record_deletes_no_file_of_the_users_and_no_symbolic_link(kind, tmp_path, caplog, how):
    """A record that lists a user's file (with a digest not its own) and a symbolic link: ``--overwrite`` removes
    neither, nor anything through the link, and says what it kept and why."""
    spec = KINDS[kind][0]
    out = write(kind, tmp_path / "out")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "data.bin").write_text("theirs")
    (out / "precious.txt").write_text("precious")
    (out / "linkdir").symlink_to(target, target_is_directory=True)
    (out / "link.txt").symlink_to(target / "data.bin")
    if how == "in place":
        (out / "notes.txt").write_text("mine")
    record = json.loads((out / spec.record).read_text())
    (out / spec.record).write_text(json.dumps(_listing(kind, record, ["precious.txt", "linkdir", "link.txt"])))
    with caplog.at_level(logging.WARNING):
        write(kind, out, "2", overwrite=True, files=FILES[kind][:1])
    assert (out / "precious.txt").read_text() == "precious"
    assert (out / "linkdir").is_symlink() and (out / "link.txt").is_symlink()
    assert (target / "data.bin").read_text() == "theirs"
    assert (out / FILES[kind][0]).read_text() == "2" and not (out / FILES[kind][1]).exists()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert all(n in said for n in ("precious.txt", "linkdir", "link.txt")), said  # (none of the kind's layout)
    assert hidden(tmp_path) == []


def test_a_file_the_record_lists_but_the_user_changed_is_kept_beside_the_new_one(kind, tmp_path, caplog):
    spec = KINDS[kind][0]
    out = write(kind, tmp_path / "out")
    (out / FILES[kind][0]).write_text("edited by hand")
    with caplog.at_level(logging.WARNING):
        write(kind, out, "2", overwrite=True)
    assert (out / FILES[kind][0]).read_text() == "2"
    assert (out / f"{FILES[kind][0]}.kept").read_text() == "edited by hand"
    assert (out / FILES[kind][1]).read_text() == "2" and not (out / spec.replacing).exists()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"{FILES[kind][0]} (its content is not what the toolkit wrote)" in said, said
    assert f"kept as {Path(FILES[kind][0]).name}.kept" in said, said


def test_remove_output_deletes_only_files_as_the_toolkit_wrote_them(tmp_path, caplog):
    out = write("shards", tmp_path / "out")
    (out / "precious.txt").write_text("precious")
    (out / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    record = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(_listing("shards", record, ["precious.txt", "linkdir"])))
    with caplog.at_level(logging.WARNING):
        kept = _commit.remove_output(out)
    assert sorted(kept) == ["linkdir", "precious.txt"] and (out / "precious.txt").read_text() == "precious"
    assert (out / "linkdir").is_symlink() and not (out / "manifest.json").exists()
    assert not (out / "README.md").exists() and not (out / "data").exists()
    assert "precious.txt" in caplog.text


def test_a_symbolic_link_inside_an_output_is_not_written_through(tmp_path):
    out = write("shards", tmp_path / "out")
    elsewhere = tmp_path / "datasets"
    os.replace(out / "data", elsewhere)
    (out / "data").symlink_to(elsewhere)
    (out / "notes.txt").write_text("mine")  # so the output is replaced in place
    with pytest.raises(ShardError, match="symbolic link"):
        write("shards", out, "2", overwrite=True)
    assert (elsewhere / "part-00000.parquet").read_text() == "1"


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_dead_writers_partial_folder_is_removed_and_a_live_or_remote_ones_kept(kind, tmp_path):
    spec = KINDS[kind][0]
    dead, host = _dead_pid(), _commit._HOST
    left = [tmp_path / f".out.{prefix}-{dead}-1-{host}-0" for prefix in spec.orphans]
    live = tmp_path / f".out.partial-{owner_tag()}"
    remote = tmp_path / f".out.partial-{dead}-1-{'0' * 8}-0"  # another machine's: it cannot be checked from here
    other = tmp_path / f".other.partial-{dead}-1-{host}-0"  # another output's
    for d in (*left, live, remote, other):
        (d / "sub").mkdir(parents=True)
    write(kind, tmp_path / "out")
    assert hidden(tmp_path) == sorted(p.name for p in (live, remote, other))


def test_an_output_that_appears_while_another_is_written_is_not_replaced(kind, tmp_path):
    spec, error, record, _ = KINDS[kind]
    out = tmp_path / "out"
    tmp = prepare_output(out, overwrite=False, kind=spec)
    (tmp / spec.record).write_text(json.dumps(record([])))
    write(kind, out)  # another run finished first
    with pytest.raises(error, match="already exists"):
        commit_output(tmp, out, overwrite=False, kind=spec)
    assert (out / FILES[kind][0]).read_text() == "1"


def test_one_writer_at_a_time(tmp_path):
    out = tmp_path / "out"
    lock = lock_beside(out, "index")
    assert lock == tmp_path / ".out.index.lock"
    with exclusive(lock, out, "index", IndexError_, remove=True):
        with pytest.raises(IndexError_, match=f"another `curriculum index` is writing {out}") as e:
            with exclusive(lock, out, "index", IndexError_, remove=True):
                pass
        assert "choose another --out" in e.value.hint
        assert lock.exists()  # the refused run does not remove the holder's lock
    assert not lock.exists()


def test_a_resumable_output_is_refused_when_another_command_wrote_it(tmp_path):
    def ours(d, entries):
        return "eval_config.json" in entries

    kw = {"written": ours, "what": "the output of an evaluation", "error": EvalError, "ignore": (".eval.lock",)}
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(EvalError, match="is a file, where a folder is needed"):
        check_resumable(a_file, **kw)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "weights.bin").write_text("x")
    with pytest.raises(EvalError, match="holds files and is not the output of an evaluation: nothing is written"):
        check_resumable(theirs, **kw)
    (theirs / "weights.bin").unlink()
    (theirs / ".eval.lock").write_text("")
    check_resumable(theirs, **kw)  # only a lock: as good as empty
    (theirs / "eval_config.json").write_text("{}")
    check_resumable(theirs, **kw)
    check_resumable(tmp_path / "new", **kw)


def test_a_resumable_output_that_failed_before_its_first_result_is_removed(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), resumable_output(out, ".lock", "eval", EvalError, started=lambda: False):
        assert out.is_dir()
        raise RuntimeError("no model")
    assert not out.exists()
    with pytest.raises(RuntimeError), resumable_output(out, ".lock", "eval", EvalError,
                                                       started=lambda: (out / "results").exists()):
        (out / "results").mkdir()
        raise RuntimeError("later")
    assert (out / "results").is_dir()  # a result was written: kept, to be resumed
    with pytest.raises(EvalError, match="another `curriculum eval` is writing"), \
            resumable_output(out, ".lock", "eval", EvalError, started=lambda: False), \
            resumable_output(out, ".lock", "eval", EvalError, started=lambda: False):
        pass
    assert (out / "results").is_dir()  # made by an earlier run: never removed


@pytest.mark.parametrize("how", ["swapped whole", "in place"])
def test_a_record_listing_a_users_file_with_its_true_digest_does_not_make_it_the_toolkits(kind, tmp_path, caplog,
                                                                                           how):
    """A crafted record that lists a user's files with their true SHA-256: ``--overwrite`` deletes only the files
    the kind's layout says the toolkit writes, so the user's are kept (and named), whatever the record says."""
    spec = KINDS[kind][0]
    out = write(kind, tmp_path / "out")
    (out / "precious.csv").write_text("precious")
    (out / "mine").mkdir()
    (out / "mine" / "notes.md").write_text("notes")
    if how == "in place":
        (out / "other.txt").write_text("mine")
    record = json.loads((out / spec.record).read_text())
    crafted = _listing(kind, record, ["precious.csv", "mine/notes.md"])
    true = {"precious.csv": hashlib.sha256(b"precious").hexdigest(), "mine/notes.md": hashlib.sha256(b"notes").hexdigest()}
    if isinstance(crafted["files"], dict):
        crafted["files"].update({n: {"sha256": d} for n, d in true.items()})
    else:
        crafted["file_sha256"].update(true)
    (out / spec.record).write_text(json.dumps(crafted))
    with caplog.at_level(logging.WARNING):
        write(kind, out, "2", overwrite=True, files=FILES[kind][:1])
    assert (out / "precious.csv").read_text() == "precious" and (out / "mine" / "notes.md").read_text() == "notes"
    assert (out / FILES[kind][0]).read_text() == "2" and not (out / FILES[kind][1]).exists()
    assert "precious.csv" in caplog.text and "mine/" in caplog.text, caplog.text
    assert hidden(tmp_path) == []
