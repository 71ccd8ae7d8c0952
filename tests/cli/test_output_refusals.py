"""What the command line refuses so that nothing is lost or misread: a second run on the same output refused at
once (filelock), --out inside the input or a folder the toolkit did not make refused, a failed start that does not
block the corrected command, partition records without absolute paths, an empty bucket read as an empty dataset and
refused by train, train --dry-run checking what the real run checks."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from cli_runs import one_error, run, tree
from conftest import HOTPOT_TRAIN, MUSIQUE_DEV, MUSIQUE_TRAIN

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


# -- --out inside the input, or a folder the toolkit did not make ------------------------------------------
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


# -- a run that fails before generating does not block the corrected one -----------------------------------
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


# -- partition.json and partition_config.json are portable -------------------------------------------------
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


# -- CRAFT rewards follow the row's `answerable` ------------------------------------------------------------
def test_craft_rewards_score_an_unanswerable_row_as_the_eval_does(shared_data, tmp_path):
    """A craft-v1 build with unanswerable rows, read as a trainer reads it: `<gold_docs>[]` on an unanswerable row
    gets the evidence the evaluation gives it (1), citing a distractor there gets 0, and answerable rows are
    unchanged; through TRL's keyword columns, the verl entry point and the registry's craft-evidence."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.evaluation._scoring import score_row
    from rag_curriculum.rewards import get_reward
    from rag_curriculum.rewards._craft_format import parse_craft
    from rag_curriculum.shards import load_hf_dataset
    from rag_curriculum.verl.rewards import compute_craft_score

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


# -- the OpenAI backend's retries are tenacity's ------------------------------------------------------------
def test_openai_retries_are_tenacitys_and_keep_the_hints(monkeypatch):
    """The request goes through tenacity.Retrying (no loop of the toolkit's own): a retryable failure is retried
    with tenacity's wait, logged, counted; a refusal fails at once with its hint; giving up says how often."""
    import openai
    import tenacity

    from rag_curriculum.generation import GenerationError
    from rag_curriculum.generation._openai_backend import OpenAIBackend

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


# -- the bad-input corpus of the command line ------------------------------------------------------------------------
#: Placeholders: {MAX} a shard directory, {EVAL} an evaluation set, {IDX} a BM25 index, {TRAIN} MuSiQue's shared
#: sample, {OUT} where an output would go (must not appear), {FILE} a text file, {EMPTY} an empty file, {JUNK}
#: binary junk named .jsonl, {TRUNC} a truncated JSON file, {DIR} an empty folder, {MISSING} a path that is not,
#: {PART} a finished partition, {RUN} a finished evaluation. Dense: {ENC} a tiny
#: sentence-transformers encoder, {CORPUS} a corpus of 20 lines, {FLAT} an inner-product flat FAISS index of as many
#: vectors, {NANIDX} the same with a NaN and an infinity, {L1IDX} one of metric L1, {BADENC} an encoder folder with a
#: broken config.json, {MOVED} a dense index whose encoder folder was moved away.
BASES = {
    "build": ["build", "-d", "musique", "-i", "{TRAIN}", "-o", "{OUT}", "--n", "3", "--no-progress"],
    "index": ["index", "-d", "musique", "-i", "{TRAIN}", "-o", "{OUT}", "--depth", "5", "--no-progress"],
    "partition": ["partition", "{MAX}", "--backend", "scripted", "--model", "trust3_script:ok", "-o", "{OUT}",
                  "--no-progress"],
    "eval": ["eval", "--model", "m=trust3_script:ok", "--data", "{EVAL}", "--backend", "scripted", "--no-plots",
             "-o", "{OUT}", "--no-progress"],
    "serve": ["serve", "--index", "{IDX}"],
    "index --kind dense": ["index", "--kind", "dense", "--encoder", "{ENC}", "--corpus", "{CORPUS}", "-o", "{OUT}",
                           "--device", "cpu", "--no-progress"],
    "index --import-faiss": ["index", "--kind", "dense", "--encoder", "{ENC}", "--import-faiss", "{FLAT}", "--corpus",
                             "{CORPUS}", "-o", "{OUT}", "--device", "cpu", "--no-progress"],
    "serve dense": ["serve", "--index", "{MOVED}", "--port", "1"],
    "index --engine ray": ["index", "--kind", "dense", "--encoder", "{ENC}", "--corpus", "{CORPUS}", "-o", "{OUT}",
                           "--device", "cpu", "--no-progress", "--engine", "ray"],
    "inspect": ["inspect", "{TRAIN}"],
    "train": ["train", "recipe=rag-rl-min-max", "data.shards={MAX}", "--print-config"],
    "train --dry-run": ["train", "recipe=cpu-tiny", "data.shards={MAX}", "--dry-run"],
    "partition-merge": ["partition-merge", "{PART}", "-o", "{OUT}"],
    "eval compare": ["eval", "compare", "{RUN}", "-o", "{OUT}/t.md"],
    "warm-start": ["warm-start", "{MAX}", "--out", "{OUT}"],
    "warm-start --agent": ["warm-start", "{MAX}", "--out", "{OUT}", "--agent", "search-r1", "--retriever", "{IDX}"],

    "build hotpotqa": ["build", "-d", "hotpotqa", "-i", "{HOTPOT}", "-o", "{OUT}", "--n", "3", "--no-progress"],
    "eval transformers": ["eval", "--model", "m=x", "--data", "{EVAL}", "--backend", "transformers", "--no-plots",
                          "-o", "{OUT}", "--no-progress"],
}
INT, FLOAT = ("abc", "-7", "1.5", "99999999999999999999"), ("abc", "-1", "1e999", "nan")
OPTIONS = {  # option: the bad values tried (each a case)
    "build": {"--K": INT, "--n": ("abc", "-5", "0", "1.5"), "--seed": INT, "--max-distractors": INT[:3],
              "--top-k": INT[:3], "--index-base": ("abc", "-3", "7"), "--batch-prompts": INT[:3],
              "--rows-per-shard": INT[:3] + ("0",), "--unanswerable-fraction": ("abc", "-0.1", "1.5", "nan"),
              "--workers": ("abc", "-2"), "--schedule": ("linar", ""), "--order": ("nosuch",),
              "--setting": ("distracter", ""), "--split": ("nosuch",), "--distractors": ("nosuch",),
              "--tail": ("chop",), "--leakage": ("nosuch",), "--on-error": ("ignore",), "--template": ("nosuch",),
              "-d": ("nosuch", ""), "--pieces": ("nosuch", "1:2:3"), "--abstention-answer": ("",),
              "--tokenizer": ("{MISSING}",), "--index": ("{MISSING}", "{FILE}", "{DIR}"),
              "--eval-set": ("{MISSING}", "{FILE}"), "-i": ("{MISSING}", "{EMPTY}", "{JUNK}", "{TRUNC}", "{DIR}")},
    "index": {"--k1": FLOAT, "--b": FLOAT + ("1.5",), "--delta": ("abc", "-1"), "--depth": INT[:3] + ("0",),
              "--threads": ("abc", "-3"), "--method": ("nosuch",), "--stopwords": ("klingon",),
              "--backend": ("nosuch",), "--on-error": ("ignore",), "-d": ("nosuch",),
              "--corpus": ("{MISSING}", "{JUNK}", "{DIR}"), "-i": ("{MISSING}", "{EMPTY}", "{JUNK}", "{DIR}"),
              "--kind": ("dense", "hybrid", "nosuch"), "--max-memory": ("8GB",), "--encoder": ("{ENC}",),
              "--engine": ("ray", "nosuch")},
    # Every bad dense value refused in one line (exit 2 before any model loads)
    "index --kind dense": {"--max-memory": ("abc", "nan", "-1GB", "1e400GB", "0"), "--device": ("bogus", ""),
                           "--encoder": ("{MISSING}", "{DIR}", "{FILE}", "{BADENC}"), "--faiss": ("Bogus",),
                           "--compress": ("IVF4,Flat",), "--import-faiss": ("{NANIDX}", "{L1IDX}", "{MISSING}",
                                                                           "{FILE}")},
    "index --import-faiss": {"--compress": ("Bogus", ""), "--import-faiss": ("{NANIDX}", "{L1IDX}"),
                             "--faiss": ("HNSW8",), "--max-memory": ("1GB",), "--engine": ("ray",)},
    # The Ray Data encoding's options; a cluster that cannot be reached (refused in seconds)
    "index --engine ray": {"--ray-address": ("127.0.0.1:9", ""), "--num-workers": ("abc", "0", "-1"),
                           "--cpus-per-worker": ("abc", "0", "-1"), "--gpus-per-worker": ("abc", "-1"),
                           "--engine": ("nosuch",), "--import-faiss": ("{FLAT}",)},
    # A dense index whose encoder moved, refused before "serving ..." is printed
    "serve dense": {"--encoder": ("{MISSING}", "{DIR}", "{FILE}", "{BADENC}"), "--device": ("bogus",),
                    "--engine": ("nosuch",), "--index": ("{MOVED}",)},
    "partition": {"--n": INT, "--K": INT, "--pass-at": INT + ("0", "2000"), "--temperature": FLOAT,
                  "--top-p": FLOAT + ("0", "1.5"), "--max-tokens": INT + ("0",), "--seed": INT,
                  "--correct-f1": FLOAT + ("0", "2"), "--chunk-size": INT + ("0",), "--chunks-per-call": INT[:3],
                  "--num-shards": INT[:3] + ("0",), "--shard-index": ("abc", "-1", "1.5", "5"),
                  "--max-chunks": ("abc", "-1", "0"), "--backend": ("nosuch", ""), "--engine": ("nosuch",),
                  "--num-workers": ("abc", "-1"), "--gpus-per-worker": ("abc", "-1"),
                  "--cpus-per-worker": ("abc", "-1"), "--chunk-retries": ("abc", "-1"),
                  "--backend-arg": ("novalue", "nosuch=1", "=1", "delay=abc"), "--model": ("trust3_script:nosuch",
                                                                                          "nosuchmod:fn", "{TRUNC}"),
                  "--concurrency": ("abc",), "--batch-size": ("abc",)},
    "eval": {"--samples": INT + ("0",), "--temperature": FLOAT, "--top-p": FLOAT + ("0",), "--max-tokens": INT,
             "--seed": INT, "--limit": INT[:3] + ("0",), "--chunk-size": INT[:3] + ("0",),
             "--index-base": ("abc", "-1"), "--template": ("nosuch",), "--backend": ("nosuch",),
             "--stats": ("{MISSING}", "{FILE}", "{DIR}"), "--data": ("{MISSING}", "{FILE}", "{DIR}", "{TRAIN}"),
             "--backend-arg": ("novalue", "nosuch=1"), "--judge-arg": ("novalue",),
             "--model": ("m=trust3_script:nosuch", "=x", "m="), "--agent": ("nosuch",),
             "--faithfulness": ("nosuch",), "--engine": ("nosuch",), "--best-of": ("abc", "-1"),
             "--topk": ("abc",), "--max-turns": ("abc",)},
    "serve": {"--port": ("abc", "-5", "99999999"), "--workers": ("abc", "0", "1000"), "--max-batch": ("abc", "0"),
              "--max-topk": ("abc", "0"), "--default-topk": ("abc", "0"), "--max-body-bytes": ("abc", "10"),
              "--max-query-chars": ("abc", "0"), "--threads": ("abc", "-1")},
    "inspect": {"--dataset": ("nosuch",), "--on-error": ("ignore", ""), "": ("{MISSING}", "{EMPTY}", "{JUNK}",
                                                                              "{TRUNC}")},
    "train": {"": ("recipe=nosuch", "sead=1", "batch.prompts_per_step=abc",
                   "batch.prompts_per_step=-2", "rewards.0.name=nosuch", "rewards.0.weight=abc",
                   "data.order_policy=nosuch", "model.dtype=float7", "run.resume=", "data.max_rows=-1",
                   "data.max_rows=abc", "adaptive.controller=nosuch", "adaptive.controller=nosuchmod:Cls",
                   "dynamic.enabled=true dynamic.metric=nosuch", "=1", "data.shards=", "model.name_or_path={MISSING}/m")},
    # What the real run refuses before its model loads, the dry run refuses too
    "train --dry-run": {"": ("batch.prompts_per_step=16", "data.max_rows=1", "run.resume=last", "run.resume={MISSING}",
                             "batch.prompts_per_step=512 +agent.retriever={IDX}")},
    "partition-merge": {"--correct-f1": ("abc", "-1", "2"), "--shards": ("{MISSING}",), "": ("{MISSING}",
                                                                                              "{DIR}")},
    "eval compare": {"--section": ("nosuch",), "": ("{MISSING}", "{DIR}", "{FILE}")},
    # Every bad value refused before a model is made or a folder written
    "warm-start": {"--rows": INT + ("0",), "--copies": INT + ("0",), "--epochs": FLOAT + ("0",),
                   "--plain": FLOAT + ("1",), "--learning-rate": FLOAT, "--seed": INT[:2] + INT[3:],
                   "--hidden-size": INT, "--layers": ("abc", "0", "99999999999999999999"),
                   "--model": ("{MISSING}", "{FILE}", "{DIR}"), "--agent": ("nosuch", "search-r1"),
                   "--retriever": ("{IDX}", "{MISSING}"), "--topk": INT[:3] + ("0",), "--template": ("nosuch",)},
    # a search agent's warm start: a retriever that cannot answer is refused before anything is written
    "warm-start --agent": {"--retriever": ("{MISSING}", "{DIR}", "{FILE}", "http://127.0.0.1:9"),
                           "--template": ("nosuch", "search-tools")},
    # A paragraph whose sentences are a string; an input that holds no question, a JSONL file
    # cut short; a corpus id reused by another passage; the body limits of serve; a
    # model folder that is not there, with the Hub off
    "build hotpotqa": {"-i": ("{HPSTRING}",)},
    "build --n all": {"-i": ("{EMPTYLIST}", "{CUTJSONL}")},
    "index --corpus": {"--corpus": ("{DUPCORPUS}",)},
    "serve --body": {"--body-timeout": FLOAT + ("0",), "--min-body-rate": ("abc", "0", "-5", "1.5")},
    "eval transformers": {"--model": ("m=nosuchdir/sub", "m={MISSING}/m", "m=./nosuchdir")},
}
BASES["build --n all"] = [*BASES["build"][:-3], "--n", "all", "--no-progress"]
BASES["index --corpus"] = ["index", "--corpus", "{FILE}", "-o", "{OUT}", "--no-progress"]
BASES["serve --body"] = BASES["serve"]
# What is not a shard directory, and a repository id the Hub would refuse, before any network
BASES["push"] = ["push", "{MAX}", "me/curriculum", "--dry-run"]
BASES["push repo"] = BASES["push"]
OPTIONS["push"] = {"": ("{MISSING}", "{FILE}", "{DIR}", "{IDX}", "{PART}", "{RUN}")}
OPTIONS["push repo"] = {"": ("me/bad name", "", "a/b/c", "me/x..y")}


def corpus_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for command, options in OPTIONS.items():
        for option, values in options.items():
            for value in values:
                args = [*BASES[command]]
                if option == "":  # a positional value or an override: replaces the base's own where it has one
                    if command in ("inspect", "partition-merge", "push"):
                        args[1] = value
                    elif command in ("eval compare", "push repo"):
                        args[2] = value
                    else:
                        args += value.split(" ")
                elif option in args:  # an option of the base: its value replaced
                    args[args.index(option) + 1] = value
                else:
                    args += [option, value]
                cases.append((f"{command} {option} {value!r}", args))
    return cases


CORPUS = corpus_cases()
#: Cases that fail while the command runs (exit 1) although their value is not a path: a file's contents disagree
#: with the value, or a required setting was left empty.
EXIT_1 = {"build --split 'nosuch'", "build --pieces 'nosuch'", "build --pieces '1:2:3'", "train  'data.shards='",
          "train --dry-run  'batch.prompts_per_step=16'", "train --dry-run  'data.max_rows=1'",
          "train --dry-run  'run.resume=last'", "warm-start --agent --retriever 'http://127.0.0.1:9'",
          "index --engine ray --ray-address '127.0.0.1:9'"}
#: Path-valued cases that are usage errors (exit 2): a model reference that is neither a folder nor a Hub id.
EXIT_2 = {"train  'model.name_or_path={MISSING}/m'", "warm-start --retriever '{IDX}'",
          "warm-start --retriever '{MISSING}'", "index --encoder '{ENC}'", "index --engine ray --import-faiss '{FLAT}'",
          "eval transformers --model 'm={MISSING}/m'"}
CLICK = ("Invalid value", "No such option", "Missing argument", "Missing option")


def test_the_corpus_covers_every_command_with_250_cases():
    assert len(CORPUS) >= 250 and len({name for name, _ in CORPUS}) == len(CORPUS)
    from rag_curriculum.cli import app as cli_app

    commands = {c.name for c in cli_app.registered_commands} | {"eval"}
    covered = {name.split(" -")[0].split("  ")[0] for name, _ in CORPUS}
    assert commands - {"recipes", "validate"} <= covered | {"eval compare"}, commands - covered


@pytest.fixture(scope="module")
def corpus_paths(tmp_path_factory, max_dir, eval_dir, script) -> dict[str, Path]:
    import os

    root = tmp_path_factory.mktemp("corpus")
    for args in (["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", root / "idx", "--depth", 5, "--no-progress"],
                 ["partition", max_dir, "--backend", "scripted", "--model", "trust3_script:ok", "-o", root / "part",
                  "--no-progress", "--pass-at", 2],
                 ["eval", "--model", "m=trust3_script:ok", "--data", eval_dir, "--backend", "scripted", "--no-plots",
                  "-o", root / "run", "--no-progress"]):
        r = run(*args)
        assert r.exit_code == 0, r.output
    (root / "f.txt").write_text("mine")
    (root / "empty.jsonl").write_text("")
    (root / "junk.jsonl").write_bytes(os.urandom(300))
    (root / "trunc.json").write_text('{"a": [1, 2')
    (root / "dir").mkdir()

    hotpot = json.loads(HOTPOT_TRAIN.read_text())[:4]
    hotpot[1]["context"][0][1] = "".join(hotpot[1]["context"][0][1])  # a paragraph's sentences as one string
    (root / "hotpot-string.json").write_text(json.dumps(hotpot))
    (root / "empty-list.json").write_text("[]")
    lines = MUSIQUE_TRAIN.read_bytes().splitlines(keepends=True)[:3]
    (root / "cut.jsonl").write_bytes(b"".join(lines)[:-300])  # the last line cut short
    (root / "dup-corpus.jsonl").write_text('{"id": "1", "contents": "A\\nalpha"}\n{"id": "2", "contents": "B\\nbeta"}\n'
                                           '{"id": "1", "contents": "C\\ngamma"}\n')
    return {"MAX": max_dir, "EVAL": eval_dir, "IDX": root / "idx", "PART": root / "part", "RUN": root / "run",
            "TRAIN": MUSIQUE_TRAIN, "FILE": root / "f.txt", "EMPTY": root / "empty.jsonl",
            "JUNK": root / "junk.jsonl", "TRUNC": root / "trunc.json", "DIR": root / "dir",
            "MISSING": root / "missing", "HOTPOT": HOTPOT_TRAIN, "HPSTRING": root / "hotpot-string.json",
            "EMPTYLIST": root / "empty-list.json", "CUTJSONL": root / "cut.jsonl",
            "DUPCORPUS": root / "dup-corpus.jsonl", **_dense_paths(root)}


def _dense_paths(root: Path) -> dict[str, Path]:
    """The dense cases' inputs (placeholders above), or paths that are not there without the dense extra (those
    cases then fail as their missing inputs do)."""
    import shutil

    out = {k: root / "no-dense" / k for k in ("ENC", "CORPUS", "FLAT", "NANIDX", "L1IDX", "BADENC", "MOVED")}
    try:
        import faiss
        import numpy as np
        from tiny_model import build_tiny_encoder
    except ImportError:
        return out
    from conftest import SHARED_DATA

    enc = build_tiny_encoder(root / "enc", SHARED_DATA)
    corpus = root / "corpus.jsonl"
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:2]]
    paragraphs = [p for r in lines for p in r["paragraphs"]][:20]
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": f"{p['title']}\n{p['paragraph_text']}"}) + "\n"
                              for i, p in enumerate(paragraphs)))
    x = np.random.default_rng(0).standard_normal((len(paragraphs), 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for name, index, vecs in (("flat", faiss.IndexFlatIP(32), x), ("l1", faiss.IndexFlat(32, faiss.METRIC_L1), x),
                              ("nan", faiss.IndexFlatIP(32), np.where(np.eye(len(x), 32, 3) > 0, np.nan, x))):
        index.add(np.ascontiguousarray(vecs, dtype=np.float32))
        faiss.write_index(index, str(root / f"{name}.index"))
    shutil.copytree(enc, root / "badenc")
    (root / "badenc" / "config.json").write_text("{")
    shutil.copytree(enc, root / "enc-moving")
    r = run("index", "--kind", "dense", "--encoder", root / "enc-moving", "--import-faiss", root / "flat.index",
            "--corpus", corpus, "-o", root / "moved", "--device", "cpu", "--no-progress")
    assert r.exit_code == 0, r.output
    (root / "enc-moving").rename(root / "enc-moved")
    return {"ENC": enc, "CORPUS": corpus, "FLAT": root / "flat.index", "NANIDX": root / "nan.index",
            "L1IDX": root / "l1.index", "BADENC": root / "badenc", "MOVED": root / "moved"}


def _state(paths: dict[str, Path]) -> dict[str, tuple[int, int]]:
    """Every input file's size and modification time (a change to any input shows)."""
    out = {}
    for p in map(Path, paths.values()):
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file() and not f.name.endswith(".lock"):
                st = f.stat()
                out[str(f)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("name, args", CORPUS, ids=[name for name, _ in CORPUS])
def test_bad_input(name, args, corpus_paths, tmp_path):
    """Each case: exit 2 (a usage error) or 1 (a failure while running), one error line and no traceback, no
    output folder left, every input unchanged."""
    out = tmp_path / "out"
    before = _state(corpus_paths)
    r = run(*[a.format(OUT=out, **corpus_paths) for a in args])
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit), (r.output, r.exception)
    if any(c in r.output for c in CLICK):  # refused by click while parsing: its own one-message box
        assert r.exit_code == 2, r.output
        assert r.output.count("Error") == 1, r.output
    else:
        path_valued = "{" in name
        code = 1 if name in EXIT_1 else 2 if name in EXIT_2 else 1 if path_valued else 2
        line = one_error(r, code=code)
        assert len(line) < 600, line
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert _state(corpus_paths) == before


# -- every command prints its composed configuration without running -----------------------------------------
def test_every_command_prints_its_config_without_running(max_dir, eval_dir, tmp_path):
    import yaml

    out = tmp_path / "o"
    cases = {
        "build": (["build", "recipe=musique-min-max", f"input={MUSIQUE_TRAIN}", "seed=7", "--n", 5, "-o", out],
                  lambda c: c["seed"] == 7 and c["sources"][0]["n"] == 5 and c["schedule"] == "min-max"),
        "index": (["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", out, "--k1", 1.2],
                  lambda c: c["k1"] == 1.2 and c["out"] == str(out)),
        "partition": (["partition", max_dir, "recipe=rag-rl-pass8", "k=4", "--backend", "openai", "--model", "m",
                       "--base-url", "http://me:PW@host/v1", "-o", out],
                      lambda c: c["k"] == 4 and c["balance"] is True and "PW" not in str(c)),
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


# -- noise ----------------------------------------------------------------------------------------------------
def test_index_prints_no_bm25s_debug_line(shared_data, tmp_path):
    import logging

    from rag_curriculum._cli.common import configure_logging

    configure_logging()
    bm25s = logging.getLogger("bm25s")
    seen = []
    for h in logging.getLogger().handlers:
        seen.append(all(f(logging.LogRecord("bm25s", logging.DEBUG, "x", 1, "Building index from IDs", None, None))
                        if callable(f) else f.filter(logging.LogRecord("bm25s", logging.DEBUG, "x", 1, "m", None,
                                                                       None)) for f in h.filters))
    assert seen and not any(seen), "bm25s's DEBUG line passes a handler"
    assert bm25s.name == "bm25s"


def test_a_real_training_run_prints_one_config_line_not_the_yaml():
    import inspect

    from rag_curriculum._cli import train as cli_train

    src = inspect.getsource(cli_train.train)
    assert "if main and (print_config or dry_run)" in src and "train_config.yaml" in src


# -- Ray's token authentication is named as the cause -------------------------------------------------------
def test_a_ray_auth_refusal_is_named_not_blamed_on_the_install(monkeypatch):
    import ray
    from ray.exceptions import AuthenticationError

    from rag_curriculum.errors import EngineError
    from rag_curriculum.generation._engine import EngineConfig
    from rag_curriculum.generation._ray_engine import AUTH_HINT, RayEngine, is_auth_error

    def refuse(**kw):
        raise AuthenticationError("Authentication failed: the token does not match the cluster's")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    engine = RayEngine(EngineConfig(engine="ray", ray_address="auto"))
    with pytest.raises(EngineError, match="Ray's token authentication refused it") as ei:
        engine.connect()
    assert ei.value.hint == AUTH_HINT and "RAY_AUTH_MODE" in AUTH_HINT and "every node has the toolkit" not in AUTH_HINT
    assert is_auth_error(RuntimeError("grpc: UNAUTHENTICATED: missing x-ray-authorization header"))
    assert not is_auth_error(RuntimeError("No module named 'rag_curriculum'"))
    text = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text()
    assert "RAY_AUTH_MODE=disabled ray start" in text and "ray get-auth-token --generate" in text


# -- the quickstart does not warn about its own settings ----------------------------------------------------
def test_the_quickstart_build_fits_its_own_batch(shared_data, tmp_path, caplog):
    import logging
    import shlex

    text = (Path(__file__).parents[2] / "scripts" / "quickstart.sh").read_text()
    line = text.split("curriculum build ", 1)[1].split("\ncurriculum validate", 1)[0]
    args = shlex.split(line.replace("\\\n", " ").split("#")[0].replace('"$INPUT"', str(MUSIQUE_TRAIN))
                       .replace('"$N"', "all"))
    args[args.index("--out") + 1] = str(tmp_path / "mm")
    with caplog.at_level(logging.WARNING):
        r = run("build", *args, "--no-progress")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "mm" / "manifest.json").read_text())
    assert manifest["trainer_tail"]["unseen_rows"] == 0 and manifest["num_rows"] % 42 == 0
    assert "0 row(s) never seen" in r.output and "WARNING" not in caplog.text, (r.output, caplog.text)


def test_known_dependency_deprecations_are_hidden_on_the_command_line():
    import warnings

    from rag_curriculum._cli.common import KNOWN_WARNINGS, configure_logging

    with warnings.catch_warnings(record=True) as seen:  # the filters are put back as they were afterwards
        warnings.simplefilter("always")
        configure_logging()
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning,
                      stacklevel=1)
        warnings.warn("a warning of our own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["a warning of our own"] and KNOWN_WARNINGS
