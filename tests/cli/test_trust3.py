"""Issue 26 ("Trust, round three"), the cases that lost data or misled: a second run on the same output refused at
once (filelock, item 4), --out inside the input or a folder the toolkit did not make refused (item 3), a failed
start that does not block the corrected command (item 7), partition records without absolute paths (item 5), an
empty bucket read as an empty dataset and refused by train (item 11), train --dry-run checking what the real run
checks (item 6)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app

SCRIPT = '''
import threading

release = threading.Event()
started = threading.Event()

def ok(messages, n, seed):
    return ["<think>t</think> Final answer: yes"] * n

def wrong(messages, n, seed):
    return ["<think>t</think> Final answer: zzzq"] * n

def slow(messages, n, seed):
    started.set()
    assert release.wait(60), "never released"
    return ["<think>t</think> Final answer: yes"] * n
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


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    d = tmp_path_factory.mktemp("scripts")
    (d / "trust3_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(d))
    import trust3_script

    yield trust3_script
    sys.path.remove(str(d))
    sys.modules.pop("trust3_script", None)


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("t3") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=2)], schedule="max",
                                 out=str(out), seed=0), command="t")
    return out


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("t3") / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 3)], setting="distractor",
                                 out=str(out), seed=0), command="t")
    return out


def partition(max_dir, out, model, *more):
    return run("partition", max_dir, "--backend", "scripted", "--model", model, "--pass-at", 2, "--no-progress",
               "-o", out, *more)


def evaluate(eval_dir, out, model, *more):
    return run("eval", "--model", f"m={model}", "--data", eval_dir, "--backend", "scripted", "--no-plots", "-o", out,
               *more)


@pytest.fixture(scope="module")
def empty_bucket(tmp_path_factory, max_dir, script) -> Path:
    """A finished partition where the model answered nothing: answerable/ is empty (the normal weak-model case)."""
    out = tmp_path_factory.mktemp("t3") / "weak"
    r = partition(max_dir, out, "trust3_script:wrong")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "answerable" / "manifest.json").read_text())["num_rows"] == 0
    return out / "answerable"


# -- item 4: a second run on the same output is refused at once ----------------------------------------------------
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


@pytest.mark.parametrize("command", ["partition", "eval"])
def test_a_second_run_on_the_same_out_is_refused_at_once(max_dir, eval_dir, script, tmp_path, command):
    """The first run is really running (its script blocks inside generation, holding the lock); the second is
    refused in one line before it writes anything, and the first then finishes as if alone."""
    out = tmp_path / "out"
    script.release.clear()
    script.started.clear()
    first = (lambda: partition(max_dir, out, "trust3_script:slow")) if command == "partition" else (
        lambda: evaluate(eval_dir, out, "trust3_script:slow"))
    t, box = _in_thread(first)
    try:
        assert script.started.wait(60), box
        before = tree(out)
        second = partition(max_dir, out, "trust3_script:ok") if command == "partition" else evaluate(
            eval_dir, out, "trust3_script:ok")
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
    again = partition(max_dir, out, "trust3_script:slow") if command == "partition" else evaluate(
        eval_dir, out, "trust3_script:slow")
    assert again.exit_code == 0, again.output  # the lock was let go: a later run goes on (reusing the results)


def test_shards_of_one_partition_hold_their_own_locks(max_dir, script, tmp_path):
    from rag_curriculum._plumbing import held_or_refused
    from rag_curriculum.partition._run import run_lock_name

    out = tmp_path / "out"
    with held_or_refused(out / "work" / run_lock_name(0, 2), RuntimeError):  # shard 0 of 2 is running
        r = partition(max_dir, out, "trust3_script:ok", "--num-shards", 2, "--shard-index", 1, "--chunk-size", 1)
        assert r.exit_code == 0, r.output  # shard 1 works beside it
        line = one_error(partition(max_dir, out, "trust3_script:ok", "--num-shards", 2, "--shard-index", 0,
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


# -- item 3: --out inside the input, or a folder the toolkit did not make ------------------------------------------
@pytest.mark.parametrize("where", [".", "sub", "sub/deeper"])
def test_partition_out_equal_to_or_inside_its_input_is_refused(max_dir, script, where):
    before = tree(max_dir)
    out = max_dir if where == "." else max_dir / where
    for more in ([], ["--overwrite"]):
        line = one_error(partition(max_dir, out, "trust3_script:ok", *more), code=2)
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
    r = (partition(max_dir, mine, "trust3_script:ok", *more) if command == "partition" else
         evaluate(eval_dir, mine, "trust3_script:ok", *more))
    line = one_error(r)
    assert f"--out {mine} holds files and is not the output of a" in line and "nothing is written" in line, line
    assert tree(mine) == before and sorted(p.name for p in mine.iterdir()) == ["notes.txt", "sub"]


@pytest.mark.parametrize("command", ["partition", "eval"])
def test_the_toolkits_own_output_is_still_rerun_and_overwritten(max_dir, eval_dir, script, tmp_path, command):
    out = tmp_path / "o"
    go = (lambda *m: partition(max_dir, out, "trust3_script:ok", *m)) if command == "partition" else (
        lambda *m: evaluate(eval_dir, out, "trust3_script:ok", *m))
    for more in ([], [], ["--overwrite"]):
        r = go(*more)
        assert r.exit_code == 0, r.output


# -- item 7: a run that fails before generating does not block the corrected one -----------------------------------
def test_a_partition_that_failed_before_generating_does_not_block_the_corrected_command(max_dir, script, tmp_path):
    out = tmp_path / "p"
    r = partition(max_dir, out, tmp_path / "nonexistent.json")
    assert r.exit_code in (1, 2) and "Traceback" not in r.output
    r = partition(max_dir, out, "trust3_script:nosuch")  # another failure before the first chunk
    assert r.exit_code == 2
    r = partition(max_dir, out, "trust3_script:ok")
    assert r.exit_code == 0, r.output
    assert "holds results of a run with other settings" not in r.output
    assert (out / "partition.json").is_file()
    # once something was generated, other settings are refused as before (the results are protected)
    line = one_error(partition(max_dir, out, "trust3_script:wrong"))
    assert "holds results of a run with other settings" in line, line


# -- item 5: partition.json and partition_config.json are portable -------------------------------------------------
def test_partition_records_hold_no_absolute_path(max_dir, script, tmp_path, monkeypatch):
    out = tmp_path / "deep" / "p"
    monkeypatch.setattr(sys, "argv", ["curriculum", "partition", str(max_dir.resolve()), "--backend", "scripted",
                                      "--model", "trust3_script:ok", "--out", str(out.resolve()), "--seed", "3"])
    r = partition(max_dir.resolve(), out.resolve(), "trust3_script:ok", "--seed", 3)
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


# -- item 11: an empty bucket is an empty dataset --------------------------------------------------------------------
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


# -- item 6: train --dry-run checks what the real run checks ---------------------------------------------------------
@pytest.fixture(scope="module")
def adaptive_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("t3") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=2)], schedule="adaptive",
                                 out=str(out), seed=0), command="t")
    return out


#: A batch the 4-row shards fill.
SMALL = ["batch.num_processes=1", "batch.prompts_per_step=2", "batch.per_device_completions=2",
         "grpo.num_generations=2", "grpo.bf16=false", "grpo.use_vllm=false"]


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


# -- item 13: CRAFT rewards follow the row's `answerable` ------------------------------------------------------------
def test_craft_rewards_score_an_unanswerable_row_as_the_eval_does(shared_data, tmp_path):
    """A craft-v1 build with unanswerable rows, read as a trainer reads it: `<gold_docs>[]` on an unanswerable row
    gets the evidence the evaluation gives it (1), citing a distractor there gets 0, and answerable rows are
    unchanged; through TRL's keyword columns, the verl entry point and the registry's craft-evidence."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.evaluation._scoring import score_row
    from rag_curriculum.rewards import get_reward
    from rag_curriculum.rewards._craft_format import parse_craft
    from rag_curriculum.rewards.verl import compute_craft_score
    from rag_curriculum.shards import load_hf_dataset

    out = tmp_path / "craft"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 8, K=2)], schedule="max",
                                 template="craft-v1", unanswerable_fraction=0.5, out=str(out), seed=0),
                     command="t")
    ds = load_hf_dataset(out)
    rows = list(ds)
    assert {r["answerable"] for r in rows} == {True, False}
    total, evidence = get_reward("craft"), get_reward("craft-evidence")
    for r in rows:
        gold = r["gold_labels"]
        answer = r["answers"][0]
        cite = "[]" if not r["answerable"] else "[" + ", ".join(gold) + "]"
        wrong = next(p["label"] for p in r["passages"] if p["label"] not in gold)
        for docs, expected in ((cite, 1.0), (f"[{wrong}]", None)):
            y = f"<plan>p</plan><gold_docs>{docs}</gold_docs><reason>doc says</reason><answer>{answer}</answer>"
            assert parse_craft(y, variant="craft-v1").valid
            eval_f1 = score_row(r, [y])["citation_f1"]  # the eval's scorer, by the row's template
            cols = {k: [r[k]] for k in ("answers", "gold_labels", "passages", "question", "reward_model",
                                       "extra_info", "answerable")}
            got = evidence([[{"role": "assistant", "content": y}]], **cols)[0]
            assert got == pytest.approx(eval_f1), (r["id"], r["answerable"], docs)
            if expected is not None:
                assert got == expected, (r["id"], docs)
            elif not r["answerable"]:
                assert got == 0.0
            verl = compute_craft_score("musique", y, r["reward_model"]["ground_truth"])
            assert verl["evidence"] == pytest.approx(eval_f1)
            assert total([[{"role": "assistant", "content": y}]], **cols)[0] == pytest.approx(verl["score"])


# -- item 17: the OpenAI backend's retries are tenacity's ------------------------------------------------------------
def test_openai_retries_are_tenacitys_and_keep_the_hints(monkeypatch):
    """The request goes through tenacity.Retrying (no loop of the toolkit's own): a retryable failure is retried
    with tenacity's wait, logged, counted; a refusal fails at once with its hint; giving up says how often."""
    import openai
    import tenacity

    from rag_curriculum.generation.base import GenerationError
    from rag_curriculum.generation.openai_backend import OpenAIBackend

    calls = []
    real = tenacity.Retrying.__call__

    def spy(self, fn, *a, **k):
        calls.append(self)
        return real(self, fn, *a, **k)

    monkeypatch.setattr(tenacity.Retrying, "__call__", spy)
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", max_retries=2, backoff=0.001, timeout=0.2)
    with pytest.raises(GenerationError, match=r"after 3 attempt\(s\).*hint:"):
        b._with_retries({"model": "m", "messages": []}, threading.Event())
    assert calls and b.retries == 2
    import httpx

    refused = openai.AuthenticationError("no", response=httpx.Response(401, request=httpx.Request("POST", "http://x")),
                                         body={"message": "bad key"})
    monkeypatch.setattr(b, "_create", lambda kw: (_ for _ in ()).throw(refused))
    with pytest.raises(GenerationError, match="HTTP 401.*hint"):
        b._with_retries({}, threading.Event())
    assert b.retries == 2  # not retried
