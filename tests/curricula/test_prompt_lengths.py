"""No prompt is truncated silently: `curriculum build --tokenizer` counts every prompt's tokens (chat template
applied) into a prompt_tokens column and the manifest; `curriculum train` (and its --dry-run) and the verl launch
script refuse a curriculum whose prompts do not fit their limits, naming the rows, their levels and the setting,
before any model is loaded. Real tokenizer (the tiny model's ChatML one) on the real MuSiQue sample."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.shards import (
    ROW_SCHEMA,
    ShardError,
    read_manifest,
    read_rows,
    shard_files,
    validate_shards,
)

pytest.importorskip("transformers", reason="the `train` extra is needed for tokenizer tests")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "run_grpo.sh"


def _build(out: Path, *, tokenizer: str | None, workers: int | None = 1, rows_per_shard: int = 10_000,
           schedule: str = "min-max", **kw) -> dict:
    cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule=schedule, out=str(out),
                      seed=0, tokenizer=tokenizer, workers=workers, rows_per_shard=rows_per_shard, **kw)
    return build_curriculum(cfg, command="test").manifest


def _independent_counts(model_dir: Path, rows: list[dict]) -> list[int]:
    """Each prompt on its own, as TRL (apply_chat_template, tokenize=True) and as verl (render, then tokenize the
    text without special tokens) count it; both must agree."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    counts = []
    for r in rows:
        ids = tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        text = tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and text.startswith("<|im_start|>system\n")
        assert len(tok(text, add_special_tokens=False)["input_ids"]) == len(ids)
        counts.append(len(ids))
    return counts


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model_dir) -> Path:
    """The whole MuSiQue sample (100 questions), min-max with K = 20, prompt_tokens counted by the tiny model's
    tokenizer."""
    out = tmp_path_factory.mktemp("lengths") / "musique-min-max"
    _build(out, tokenizer=str(tiny_model_dir))
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory, shared_data) -> Path:
    """The same curriculum built without --tokenizer."""
    out = tmp_path_factory.mktemp("lengths-plain") / "musique-min-max"
    _build(out, tokenizer=None)
    return out


# --- build -----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_prompt_tokens_column_equals_chat_template_per_row(built, tiny_model_dir):
    rows = read_rows(built)
    assert len(rows) == 100
    assert pq.read_schema(shard_files(built)[0]).field("prompt_tokens").type == pa.int32()
    assert [r["prompt_tokens"] for r in rows] == _independent_counts(tiny_model_dir, rows)


def test_manifest_and_card_record_the_longest_prompt(built, tiny_model_dir):
    rows = read_rows(built)
    m = validate_shards(built)  # the optional column passes validation
    rec = m["prompt_tokens"]
    longest = max(rows, key=lambda r: (r["prompt_tokens"], -r["curriculum_index"]))
    assert rec["longest"] == {"tokens": longest["prompt_tokens"], "id": longest["id"],
                              "curriculum_index": longest["curriculum_index"], "level": longest["level"]}
    assert longest["level"] == 20 and longest["prompt_tokens"] > 4000  # the hard half holds the longest prompts
    assert rec["max_by_level"] == {str(lv): max(r["prompt_tokens"] for r in rows if r["level"] == lv) for lv in (1, 20)}
    assert rec["mean"] == round(sum(r["prompt_tokens"] for r in rows) / len(rows), 1)
    assert Path(rec["tokenizer"]).name == tiny_model_dir.name and not Path(rec["tokenizer"]).is_absolute()
    assert rec["add_generation_prompt"] is True  # a local tokenizer is recorded without its local path
    from transformers import AutoTokenizer

    from rag_curriculum.lengths import template_fingerprint

    assert rec["chat_template_sha256"] == template_fingerprint(AutoTokenizer.from_pretrained(str(tiny_model_dir)))
    assert Path(m["config"]["tokenizer"]).name == tiny_model_dir.name
    assert m["columns"] == [*ROW_SCHEMA.names, "prompt_tokens"]
    card = " ".join((built / "README.md").read_text().split())
    assert f"the longest is {longest['prompt_tokens']} tokens (row `{longest['id']}`" in card
    assert "$" not in card


def test_without_tokenizer_nothing_changes(plain, built):
    m = read_manifest(plain)
    assert "prompt_tokens" not in m and "tokenizer" not in m["config"]
    assert m["columns"] == ROW_SCHEMA.names
    assert pq.read_schema(shard_files(plain)[0]).names == ROW_SCHEMA.names
    assert "Prompt lengths" not in (plain / "README.md").read_text()
    # the same rows either way, the column aside
    with_col = pq.read_table(shard_files(built)[0]).drop_columns(["prompt_tokens"])
    assert with_col.equals(pq.read_table(shard_files(plain)[0]))


@pytest.mark.slow
def test_token_counts_are_the_same_whatever_the_workers(tmp_path, tiny_model_dir):
    a = _build(tmp_path / "one", tokenizer=str(tiny_model_dir), workers=1, rows_per_shard=30, schedule="linear")
    b = _build(tmp_path / "two", tokenizer=str(tiny_model_dir), workers=2, rows_per_shard=30, schedule="linear")
    one, two = shard_files(tmp_path / "one"), shard_files(tmp_path / "two")
    assert len(one) == 4
    assert [f.read_bytes() for f in one] == [f.read_bytes() for f in two]
    assert a["prompt_tokens"] == b["prompt_tokens"] and a["shards"] == b["shards"]


def test_tokenizer_errors_are_one_line(tmp_path, shared_data, monkeypatch):
    from rag_curriculum.cli import app

    runner = CliRunner()
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    base = ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--n", "5", "--no-progress"]
    for i, (arg, message) in enumerate([
        (tmp_path / "file.txt", "a file, not a tokenizer"),
        (tmp_path / "empty", "not a tokenizer directory"),
        (tmp_path / "missing" / "dir", "no such directory"),
        (MUSIQUE_TRAIN.parent, "not a tokenizer directory"),
    ]):
        r = runner.invoke(app, [*base, "-o", str(tmp_path / f"o{i}"), "--tokenizer", str(arg)])
        assert r.exit_code == 1, r.output
        text = " ".join(r.output.split())
        assert f"error: --tokenizer {arg}: {message}" in text and "Traceback" not in r.output
        assert not (tmp_path / f"o{i}").exists()
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the train extra were not installed
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "o"), "--tokenizer", "Qwen/Qwen2.5-7B-Instruct"])
    assert r.exit_code == 1 and "pip install 'rag-curriculum[train]'" in " ".join(r.output.split())


@pytest.mark.slow
def test_tokenizer_from_a_recipe_and_the_command_line(tmp_path, tiny_model_dir):
    from rag_curriculum.cli import app

    r = CliRunner().invoke(app, ["build", "recipe=musique-min-max", f"input={MUSIQUE_TRAIN}", "n=20",
                                 f"out={tmp_path / 'r'}", f"tokenizer={tiny_model_dir}", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "longest prompt:" in r.output
    r2 = CliRunner().invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--n", "20", "--no-progress",
                                  "-o", str(tmp_path / "c"), "--tokenizer", str(tiny_model_dir), "-P", "42"])
    assert r2.exit_code == 0, r2.output
    assert read_manifest(tmp_path / "r")["prompt_tokens"] == read_manifest(tmp_path / "c")["prompt_tokens"]
    # every level's longest prompt, in the target model's tokenizer (what each level asks of a trainer's context)
    by_level = read_manifest(tmp_path / "r")["prompt_tokens"]["max_by_level"]
    assert set(by_level) == {"1", "20"}
    assert f"longest prompt per level: 1: {by_level['1']}, 20: {by_level['20']}" in " ".join(r.output.split())
    r3 = CliRunner().invoke(app, ["build", "recipe=musique-min-max", f"input={MUSIQUE_TRAIN}", "n=20",
                                  f"out={tmp_path / 'n'}", "--no-progress"])
    # without a tokenizer, nothing about lengths: the trainers count them with their model (no hint to follow)
    assert r3.exit_code == 0 and "prompt lengths" not in r3.output and "longest prompt" not in r3.output


def test_validate_checks_the_optional_column_type(plain, tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(plain, d)
    f = shard_files(d)[0]
    t = pq.read_table(f)
    pq.write_table(t.append_column("prompt_tokens", pa.array([1] * t.num_rows, pa.int64())), f)
    m = json.loads((d / "manifest.json").read_text())
    with pytest.raises(ShardError, match="optional column 'prompt_tokens' has type int64, expected int32"):
        validate_shards(d, check_hashes=False)
    assert m["num_rows"] == t.num_rows


# --- curriculum train ------------------------------------------------------------------------------------------------

def _overrides(model: Path, shards: Path, out: Path, *extra: str) -> list[str]:
    return [f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}", "grpo.bf16=false",
            "grpo.max_completion_length=800", *extra]


def _no_model(monkeypatch):
    """Loading the trainer (and with it the model) fails the test."""
    import transformers

    import rag_curriculum.train._trl as trl_mod

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(trl_mod, "curriculum_classes", boom)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["built", "plain"])
def test_train_refuses_prompts_over_the_vllm_context_before_loading_the_model(which, built, plain, tiny_model_dir,
                                                                              tmp_path, monkeypatch):
    """vllm_max_model_length 3000 with 800 completion tokens leaves 2200 per prompt: every level-1 prompt fits, some
    level-20 ones do not. With the column (built) or without it (plain: the model's tokenizer counts them)."""
    from rag_curriculum.errors import PromptLengthError
    from rag_curriculum.train import compose_train_config, train

    shards = built if which == "built" else plain
    rows = read_rows(built)
    over = [r for r in rows if r["prompt_tokens"] > 2200]
    assert over and {r["level"] for r in over} == {20}  # the hard half only: every level-1 prompt fits
    _no_model(monkeypatch)
    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, shards, tmp_path / "run",
                                                            "grpo.vllm_max_model_length=3000"))
    with pytest.raises(PromptLengthError) as e:
        train(cfg)
    msg = str(e.value)
    assert msg.startswith(f"{len(over)} of 100 prompts do not fit: grpo.vllm_max_model_length=3000 must hold a prompt "
                          "plus 800 completion tokens (grpo.max_completion_length), so a prompt may have at most 2200")
    assert f"Rows over the limit, by level: level 20: {len(over)}." in msg
    first = ", ".join(f"{r['id']} (level 20, {r['prompt_tokens']} tokens)" for r in over[:5])
    assert f"First rows: {first}, ..." in msg
    top = max(rows, key=lambda r: r["prompt_tokens"])
    assert f"Set grpo.vllm_max_model_length >= {top['prompt_tokens'] + 800}" in msg
    assert "no model was loaded" in msg
    assert not (tmp_path / "run").exists()  # refused before the run wrote anything


def test_train_accepts_a_curriculum_that_fits_and_records_the_longest(built, tiny_model_dir, tmp_path, monkeypatch):
    from rag_curriculum.train import compose_train_config, train

    top = read_manifest(built)["prompt_tokens"]["longest"]["tokens"]

    class Stop(Exception):
        pass

    import rag_curriculum.train._trl as trl_mod

    def stop(*a, **k):
        raise Stop  # the checks passed: this is where the trainer (and the model) would be made

    monkeypatch.setattr(trl_mod, "curriculum_classes", stop)  # where the run builds the trainer
    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, built, tmp_path / "run",
                                                            f"grpo.vllm_max_model_length={top + 800}"))
    with pytest.raises(Stop):
        train(cfg)
    assert json.loads((tmp_path / "run" / "train_plan.json").read_text())["longest_prompt_tokens"] == top


@pytest.mark.slow
def test_dry_run_refuses_too(built, tiny_model_dir, tmp_path, monkeypatch):
    from rag_curriculum.cli import app

    _no_model(monkeypatch)
    runner = CliRunner()
    args = ["train", "recipe=rag-rl-min-max", *_overrides(tiny_model_dir, built, tmp_path / "run")]
    r = runner.invoke(app, [*args, "grpo.vllm_max_model_length=3000", "--dry-run"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "prompts do not fit: grpo.vllm_max_model_length=3000" in text and "level 20" in text
    assert "hint: an engine would truncate these prompts" in text
    top = read_manifest(built)["prompt_tokens"]["longest"]
    r = runner.invoke(app, [*args, f"grpo.vllm_max_model_length={top['tokens'] + 800}", "--dry-run"])
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert (f"longest prompt: {top['tokens']} tokens (row {top['id']}, curriculum_index {top['curriculum_index']}, "
            f"level 20) + 800 completion tokens; counted from the shards' prompt_tokens") in text
    # the memory per GPU, estimated from the model's config with the longest prompt, for this layout and the launchers
    assert f"a pass of up to {top['tokens']} + 800 tokens" in text
    assert "1 GPU [single-gpu.yaml] <- this run's 1 process, if launched so:" in text  # one line, one verdict
    assert "[zero2-7gpu.yaml]: " in text and "GiB per GPU of" in text
    # a checkpoint's size and the disk the run's checkpoints need
    assert "checkpoint: about" in text and "GiB needed" in text


def test_limits_of_trl(tiny_model_dir):
    from rag_curriculum.train._lengths import trl_limits

    args = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=None, max_completion_length=800)
    limits, notes = trl_limits(args, str(tiny_model_dir))  # unset: the model's max_position_embeddings (8192)
    assert [(lim.value, lim.completion) for lim in limits] == [(8192, 800)] and not notes
    assert "max_position_embeddings" in limits[0].setting
    args = SimpleNamespace(use_vllm=True, vllm_mode="server", max_completion_length=800, max_prompt_length=512,
                           vllm_server_base_url="http://127.0.0.1:9", vllm_max_model_length=None)
    limits, notes = trl_limits(args, str(tiny_model_dir))  # an older TRL's max_prompt_length; no server: the model's
    assert [(lim.value, lim.completion) for lim in limits] == [(8192, 800), (512, 0)]
    assert "could not read max_model_len from http://127.0.0.1:9/v1/models" in notes[0]
    limits, _ = trl_limits(SimpleNamespace(use_vllm=False, max_completion_length=800), str(tiny_model_dir))
    assert limits == []
    import trl

    assert not hasattr(trl.GRPOConfig, "max_prompt_length")  # TRL 1.x never truncates prompts itself


@pytest.mark.slow
def test_column_is_recounted_when_it_does_not_match_the_run(built, tiny_model_dir, tmp_path):
    from rag_curriculum.lengths import read_lengths, uses_column

    m = read_manifest(built)
    assert uses_column(m, str(tiny_model_dir)) and not uses_column(m, "other/model")
    assert not uses_column(m, str(tiny_model_dir), chat_template_kwargs={"enable_thinking": False})
    copy = tmp_path / "tok"
    shutil.copytree(tiny_model_dir, copy)
    from_column = read_lengths(built, str(tiny_model_dir))
    recounted = read_lengths(built, str(copy))
    assert "prompt_tokens" in from_column.source and "applied here" in recounted.source
    assert recounted.tokens == from_column.tokens


# --- verl ------------------------------------------------------------------------------------------------------------

def _verl(shards: Path, model: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "SHARDS": str(shards), "DRY_RUN": "1", "PYTHON": sys.executable, "MODEL": str(model), **env}
    full.pop("MAX_PROMPT", None)
    full.update(env)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, cwd=ROOT)


def _opts(res: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(a.split("=", 1) for a in shlex.split(res.stdout)[3:])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["built", "plain"])
def test_verl_script_derives_max_prompt_from_the_longest_prompt(which, built, plain, tiny_model_dir):
    top = read_manifest(built)["prompt_tokens"]["longest"]
    res = _verl(built if which == "built" else plain, tiny_model_dir)
    assert res.returncode == 0, res.stderr
    opts = _opts(res)
    assert opts["data.max_prompt_length"] == str(top["tokens"])
    assert opts["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == str((top["tokens"] + 800) * 2)
    assert opts["data.filter_overlong_prompts"] == "False" and opts["data.truncation"] == "error"
    source = "the shards' prompt_tokens" if which == "built" else "chat template applied here (built without"
    assert f"longest prompt: {top['tokens']} tokens (row {top['id']}" in res.stderr and source in res.stderr


@pytest.mark.slow
def test_verl_script_refuses_prompts_over_its_limits(built, tiny_model_dir):
    rows = read_rows(built)
    over = [r for r in rows if r["prompt_tokens"] > 2048]
    assert over and {r["level"] for r in over} == {20}
    res = _verl(built, tiny_model_dir, MAX_PROMPT="2048")
    assert res.returncode == 2 and res.stdout == ""
    err = " ".join(res.stderr.split())
    assert f"error: {len(over)} of 100 prompts do not fit: data.max_prompt_length=2048 is the longest prompt" in err
    assert f"level 20: {len(over)}" in err and over[0]["id"] in err
    assert "Set data.max_prompt_length (MAX_PROMPT) >=" in err and "verl would left-truncate" in err
    # verl's rollout limit, given as an override (it defaults to data.max_prompt_length)
    res = _verl(built, tiny_model_dir, "actor_rollout_ref.rollout.prompt_length=2048")
    assert res.returncode == 2
    assert "actor_rollout_ref.rollout.prompt_length=2048 is the longest prompt allowed" in res.stderr
    # vLLM's context: prompt + response
    top = read_manifest(built)["prompt_tokens"]["longest"]["tokens"]
    res = _verl(built, tiny_model_dir, f"actor_rollout_ref.rollout.max_model_len={top + 799}")
    assert res.returncode == 2 and "must hold a prompt plus 800 completion tokens" in res.stderr
    assert _verl(built, tiny_model_dir, f"actor_rollout_ref.rollout.max_model_len={top + 800}").returncode == 0
    # a limit that holds every prompt
    res = _verl(built, tiny_model_dir, MAX_PROMPT=str(top))
    assert res.returncode == 0 and _opts(res)["data.max_prompt_length"] == str(top)


@pytest.mark.slow
def test_verl_lengths_helper(built, plain, tiny_model_dir):
    from rag_curriculum.verl.data import main

    top = read_manifest(built)["prompt_tokens"]["longest"]["tokens"]
    for shards in (built, plain):
        r = subprocess.run([sys.executable, "-m", "rag_curriculum.verl", "lengths", str(shards), "--model",
                            str(tiny_model_dir)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == f"{top}\n", r.stderr
    assert main(["lengths", str(built)]) == 0  # the column alone, no model named
    assert main(["lengths", str(plain)]) == 2  # no column and no model: nothing to count with
    assert main(["check-lengths", str(built), "--prompt-length", "100", "--response-length", "8"]) == 2


@pytest.fixture
def vllm_server():
    """A server answering ``GET /v1/models`` as vLLM's (``trl vllm-serve``'s) does, with max_model_len 3000."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 3000}]})
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_server_mode_reads_the_servers_context(tiny_model_dir, vllm_server):
    from rag_curriculum.train._lengths import trl_limits

    args = SimpleNamespace(use_vllm=True, vllm_mode="server", max_completion_length=800, vllm_server_base_url=vllm_server,
                           vllm_max_model_length=8192)
    limits, notes = trl_limits(args, str(tiny_model_dir))
    assert [(lim.value, lim.completion) for lim in limits] == [(3000, 800)]
    assert limits[0].alias == f"trl vllm-serve --max-model-len, read from {vllm_server}"
    assert "runs with max_model_len=3000: the server's is checked" in notes[0]
    args.vllm_server_base_url = "http://127.0.0.1:9"  # not started yet: the given setting, checked
    limits, notes = trl_limits(args, str(tiny_model_dir))
    assert [(lim.setting, lim.value) for lim in limits] == [("grpo.vllm_max_model_length", 8192)]
    assert "the --max-model-len the server must be started with" in notes[0]


@pytest.mark.slow
def test_server_mode_refuses_like_colocate(built, tiny_model_dir, tmp_path, monkeypatch, vllm_server):
    """The 7 + 1 layout (grpo.vllm_mode=server): a prompt longer than the server's context is refused before the
    model loads, as in colocate mode, naming the server's setting."""
    from rag_curriculum.cli import app

    _no_model(monkeypatch)
    over = [r for r in read_rows(built) if r["prompt_tokens"] > 2200]
    args = ["train", "recipe=rag-rl-min-max", *_overrides(tiny_model_dir, built, tmp_path / "run"),
            "grpo.vllm_mode=server", f"grpo.vllm_server_base_url={vllm_server}", "--dry-run"]
    r = CliRunner().invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert (f"{len(over)} of 100 prompts do not fit: the vLLM server's max_model_len=3000 must hold a prompt plus 800"
            in text)
    assert f"Set the vLLM server's max_model_len (trl vllm-serve --max-model-len, read from {vllm_server})" in text
