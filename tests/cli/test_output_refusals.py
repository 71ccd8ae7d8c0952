"""What the command line refuses so that nothing is lost or misread: a second run on the same output refused at
once (filelock), --out inside the input or a folder the toolkit did not make refused, a failed start that does not
block the corrected command, partition records without absolute paths, an empty bucket read as an empty dataset and
refused by train, train --dry-run checking what the real run checks, and every command printing its composed
configuration without running."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run, tree


def partition(max_dir, out, model, *more):
    return run("partition", max_dir, "--backend", "scripted", "--model", model, "--pass-at", 2, "--no-progress",
               "-o", out, *more)


def evaluate(eval_dir, out, model, *more):
    return run("eval", "--model", f"m={model}", "--data", eval_dir, "--backend", "scripted", "--no-plots", "-o", out,
               *more)


@pytest.fixture(scope="module")
def empty_bucket(tmp_path_factory, max_dir, script) -> Path:
    """A finished partition where the model answered nothing: answerable/ is empty (the normal weak-model case)."""
    out = tmp_path_factory.mktemp("cli") / "weak"
    r = partition(max_dir, out, "scripted_answers:wrong")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "answerable" / "manifest.json").read_text())["num_rows"] == 0
    return out / "answerable"


# -- a second run on the same output is refused at once ----------------------------------------------------
def _in_thread(target):
    box: dict = {}

    def go():
        try:
            box["result"] = target()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=go)
    t.start()
    return t, box


@pytest.mark.slow
@pytest.mark.parametrize("command", ["partition", "eval"])
def test_a_second_run_on_the_same_out_is_refused_at_once(max_dir, eval_dir, script, tmp_path, command):
    """The first run is really running (its script blocks inside generation, holding the lock); the second is
    refused in one line before it writes anything, and the first then finishes as if alone."""
    out = tmp_path / "out"
    script.release.clear()
    script.started.clear()
    first = (lambda: partition(max_dir, out, "scripted_answers:slow")) if command == "partition" else (
        lambda: evaluate(eval_dir, out, "scripted_answers:slow"))
    t, box = _in_thread(first)
    try:
        assert script.started.wait(60), box
        before = tree(out)
        second = partition(max_dir, out, "scripted_answers:ok") if command == "partition" else evaluate(
            eval_dir, out, "scripted_answers:ok")
        line = one_error(second)
        assert f"another `curriculum {command}` is writing {out}" in line, line
        assert "wait for it to finish, or choose another --out" in second.output
        assert tree(out) == before  # nothing written, nothing removed
    finally:
        script.release.set()
        t.join(60)
    assert "error" not in box, box
    assert box["result"].exit_code == 0, box["result"].output
    assert (out / ("partition.json" if command == "partition" else "summary.json")).is_file()
    again = partition(max_dir, out, "scripted_answers:slow") if command == "partition" else evaluate(
        eval_dir, out, "scripted_answers:slow")
    assert again.exit_code == 0, again.output  # the lock was let go: a later run goes on (reusing the results)


def test_shards_of_one_partition_hold_their_own_locks(max_dir, script, tmp_path):
    from rag_curriculum._plumbing import held_or_refused
    from rag_curriculum.partition._run import run_lock_name

    out = tmp_path / "out"
    with held_or_refused(out / "work" / run_lock_name(0, 2), RuntimeError):  # shard 0 of 2 is running
        r = partition(max_dir, out, "scripted_answers:ok", "--num-shards", 2, "--shard-index", 1, "--chunk-size", 1)
        assert r.exit_code == 0, r.output  # shard 1 works beside it
        line = one_error(partition(max_dir, out, "scripted_answers:ok", "--num-shards", 2, "--shard-index", 0,
                                   "--chunk-size", 1))
        assert "another `curriculum partition` (shard 0 of 2) is writing" in line, line


def test_the_work_folder_lock_is_filelock_not_a_silent_fcntl(tmp_path, monkeypatch):
    """Where flock is unavailable the old lock did nothing; filelock falls back to a lock file of its own."""
    import inspect

    from rag_curriculum.generation.runner import WorkDir

    assert "fcntl" not in inspect.getsource(WorkDir.lock)
    wd = WorkDir(tmp_path / "w")
    with wd.lock():
        from filelock import FileLock, Timeout

        with pytest.raises(Timeout):
            FileLock(str(wd.path / ".lock")).acquire(timeout=0)


# -- --out inside the input, or a folder the toolkit did not make ------------------------------------------
@pytest.mark.parametrize("where", [".", "sub", "sub/deeper"])
def test_partition_out_equal_to_or_inside_its_input_is_refused(max_dir, script, where):
    before = tree(max_dir)
    out = max_dir if where == "." else max_dir / where
    for more in ([], ["--overwrite"]):
        line = one_error(partition(max_dir, out, "scripted_answers:ok", *more), code=2)
        assert "the partition would write into its own input" in line, line
    assert tree(max_dir) == before and not (max_dir / "sub").exists()


@pytest.mark.parametrize("command", ["partition", "eval"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_the_toolkit_did_not_make_is_refused(max_dir, eval_dir, script, tmp_path, command, overwrite):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "sub" / "data.csv").write_text("a,b")
    before = tree(mine)
    more = ["--overwrite"] if overwrite else []
    r = (partition(max_dir, mine, "scripted_answers:ok", *more) if command == "partition" else
         evaluate(eval_dir, mine, "scripted_answers:ok", *more))
    line = one_error(r)
    assert f"--out {mine} holds files and is not the output of a" in line and "nothing is written" in line, line
    assert tree(mine) == before and sorted(p.name for p in mine.iterdir()) == ["notes.txt", "sub"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["partition", "eval"])
def test_the_toolkits_own_output_is_still_rerun_and_overwritten(max_dir, eval_dir, script, tmp_path, command):
    out = tmp_path / "o"
    go = (lambda *m: partition(max_dir, out, "scripted_answers:ok", *m)) if command == "partition" else (
        lambda *m: evaluate(eval_dir, out, "scripted_answers:ok", *m))
    for more in ([], [], ["--overwrite"]):
        r = go(*more)
        assert r.exit_code == 0, r.output


# -- a run that fails before generating does not block the corrected one -----------------------------------
def test_a_partition_that_failed_before_generating_does_not_block_the_corrected_command(max_dir, script, tmp_path):
    out = tmp_path / "p"
    r = partition(max_dir, out, tmp_path / "nonexistent.json")
    assert r.exit_code in (1, 2) and "Traceback" not in r.output
    r = partition(max_dir, out, "scripted_answers:nosuch")  # another failure before the first chunk
    assert r.exit_code == 2
    r = partition(max_dir, out, "scripted_answers:ok")
    assert r.exit_code == 0, r.output
    assert "holds results of a run with other settings" not in r.output
    assert (out / "partition.json").is_file()
    # once something was generated, other settings are refused as before (the results are protected)
    line = one_error(partition(max_dir, out, "scripted_answers:wrong"))
    assert "holds results of a run with other settings" in line, line


# -- partition.json and partition_config.json are portable -------------------------------------------------
def test_partition_records_hold_no_absolute_path(max_dir, script, tmp_path, monkeypatch):
    out = tmp_path / "deep" / "p"
    monkeypatch.setattr(sys, "argv", ["curriculum", "partition", str(max_dir.resolve()), "--backend", "scripted",
                                      "--model", "scripted_answers:ok", "--out", str(out.resolve()), "--seed", "3"])
    r = partition(max_dir.resolve(), out.resolve(), "scripted_answers:ok", "--seed", 3)
    assert r.exit_code == 0, r.output
    for name in ("partition.json", "partition_config.json", "answerable/manifest.json"):
        text = (out / name).read_text()
        assert str(tmp_path) not in text and str(max_dir.parent) not in text, (name, text[:2000])
    summary = json.loads((out / "partition.json").read_text())
    record = json.loads((out / "partition_config.json").read_text())
    assert record["config"]["out"] == "p" and summary["config"]["out"] == "p"
    assert record["config"]["shards"] == "../../../" + max_dir.parent.name + "/musique-max" or not Path(
        record["config"]["shards"]).is_absolute()
    assert "--out p" in summary["command"] and "--seed 3" in summary["command"], summary["command"]
    # a copy elsewhere still finds its input and re-writes its outputs (the record is what merges read)
    r = run("partition-merge", out, "--shards", max_dir)
    assert r.exit_code == 0, r.output


# -- an empty bucket is an empty dataset --------------------------------------------------------------------
def test_an_empty_bucket_reads_as_an_empty_dataset(empty_bucket):
    import pyarrow.parquet as pq

    from rag_curriculum.shards import load_hf_dataset, read_table

    (shard,) = sorted((empty_bucket / "data").glob("*.parquet"))
    assert pq.read_metadata(shard).num_row_groups == 0  # a row group of 0 rows stops datasets' Parquet reader
    ds = load_hf_dataset(empty_bucket)
    assert len(ds) == 0 and "prompt" in ds.column_names and "pass_at_k" in ds.column_names
    assert ds.features["answerable"].dtype == "bool"
    assert read_table(empty_bucket).num_rows == 0
    for command in (["validate", empty_bucket], ["inspect", empty_bucket]):
        r = run(*command)
        assert r.exit_code == 0, r.output
    assert "This bucket is empty" in (empty_bucket / "README.md").read_text()


def test_datasets_reads_the_empty_shard_file_without_arrow_errors(empty_bucket):
    """What datasets can do with a split of 0 rows: its Parquet reader takes the file (no ArrowInvalid
    'BatchSize must be greater than 0'), and only its split builder refuses an empty split, as the card says."""
    import datasets

    (shard,) = sorted((empty_bucket / "data").glob("*.parquet"))
    streamed = datasets.load_dataset("parquet", data_files=str(shard), split="train", streaming=True)
    assert list(streamed) == [] and "prompt" in streamed.features
    with pytest.raises(ValueError, match="corresponds to no data"):
        datasets.load_dataset(str(empty_bucket), split="train")


def test_train_refuses_an_empty_bucket_in_one_line(empty_bucket):
    for more in (["--dry-run"], []):
        line = one_error(run("train", "recipe=rag-rl-min-max", f"data.shards={empty_bucket}", *more))
        assert "holds no rows: nothing to train on" in line, line


# -- train --dry-run checks what the real run checks ---------------------------------------------------------
@pytest.fixture(scope="module")
def adaptive_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("cli") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=2)], schedule="adaptive",
                                 out=str(out), seed=0), command="t")
    return out


#: A batch the 4-row shards fill.
SMALL = ["batch.num_processes=1", "batch.prompts_per_step=2", "batch.per_device_completions=2",
         "grpo.num_generations=2", "grpo.bf16=false", "grpo.use_vllm=false"]


@pytest.mark.slow
@pytest.mark.parametrize("overrides, code, words", [
    (["grpo.learning_rate=abc"], 2, "grpo.learning_rate = 'abc': must be a value of type float"),
    (["grpo.max_steps=1.5"], 2, "grpo.max_steps = 1.5: must be a value of type int"),
    (["grpo.use_cpu=maybe"], 2, "grpo.use_cpu = 'maybe': must be a value of type bool"),
    (["adaptive.kwargs.targt=0.6"], 1, "adaptive.kwargs.targt: not a setting of the 'target-band' controller"),
    (["adaptive.kwargs.target=high"], 2, "adaptive.kwargs.target = 'high': must be a value of type float"),
    (["adaptive.kwargs.target=5"], 1, "target=5; must be in 0..1"),
    (["adaptive.kwargs.mode=zigzag"], 1, "mode='zigzag'; must be round or sample"),
])
def test_dry_run_refuses_what_the_real_run_refuses(adaptive_dir, overrides, code, words):
    real = overrides[0].startswith("grpo.learning_rate")  # the real run too (the others: the same make_controller)
    for more in (["--dry-run"], [])[:2 if real else 1]:  # the same one line, before any model loads
        r = run("train", "recipe=rag-rl-adaptive", f"data.shards={adaptive_dir}", *SMALL, *overrides, *more)
        line = one_error(r, code=code)
        assert words in line, line


@pytest.mark.slow
def test_dry_run_refuses_shards_it_cannot_read(max_dir, eval_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(max_dir, broken)
    shard = sorted((broken / "data").glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    a_file = tmp_path / "f.parquet"
    a_file.write_text("x")
    cases = [(tmp_path / "missing", "no such shard directory"), (a_file, str(a_file)), (broken, shard.name),
             (eval_dir, "'distractor' evaluation set, not a training curriculum")]
    for shards, words in cases:
        for more in (["--dry-run"], []):
            line = one_error(run("train", "recipe=rag-rl-min-max", f"data.shards={shards}", *more))
            assert words in line, line


# -- every command prints its composed configuration without running -----------------------------------------
@pytest.mark.slow
def test_every_command_prints_its_config_without_running(max_dir, eval_dir, tmp_path):
    import yaml

    out = tmp_path / "o"
    cases = {
        "build": (["build", "recipe=musique-min-max", f"input={MUSIQUE_TRAIN}", "seed=7", "--n", 5, "-o", out],
                  lambda c: c["seed"] == 7 and c["sources"][0]["n"] == 5 and c["schedule"] == "min-max"),
        "index": (["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", out, "--k1", 1.2],
                  lambda c: c["k1"] == 1.2 and c["out"] == str(out)),
        "partition": (["partition", max_dir, "recipe=rag-rl-pass8", "samples=4", "--backend", "openai", "--model", "m",
                       "--base-url", "http://me:PW@host/v1", "-o", out],
                      lambda c: c["samples"] == 4 and c["balance"] is True and "PW" not in str(c)),
        "eval": (["eval", "--model", "m=x", "--data", eval_dir, "--backend", "scripted", "--samples", 3, "-o", out],
                 lambda c: c["m"] == 3 and c["models"][0]["path"] == "x"),
        "train": (["train", "recipe=rag-rl-min-max", f"data.shards={max_dir}", "grpo.beta=0.5", "--print-config"],
                  lambda c: c["grpo"]["beta"] == 0.5),
    }
    for command, (args, check) in cases.items():
        r = run(*args, *([] if command == "train" else ["--print-config"]))
        assert r.exit_code == 0, (command, r.output)
        assert check(yaml.safe_load(r.stdout)), (command, r.stdout)
        assert not out.exists(), command  # nothing run, nothing written
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert "--print-config" in text and "-m key=a,b" in text
