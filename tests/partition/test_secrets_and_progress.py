"""The partition and the runs around it: one masking rule for secrets in every file the toolkit writes (partition,
eval, work directories, training runs), the partition progress bar moving per question, a warning when --balance
leaves nothing, a "resuming from checkpoint" line, and a CPU training recipe that really trains."""

from __future__ import annotations

import contextlib
import json
import logging
import random
from pathlib import Path

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN

from rag_curriculum._plumbing import is_secret, mask_secrets, redact_command, redact_overrides
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.generation import runner
from rag_curriculum.generation._base import SamplingConfig, backend_identity, is_secret_option
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import PartitionConfig, partition

SECRETS = {"hf_token": "hf_SECRET_1", "api_key": "sk-SECRET-2", "password": "pw-SECRET-3"}
#: A command line as a user types it: the secrets as --api-key, --backend-arg KEY=VALUE and Hydra overrides.
COMMAND = ("curriculum partition max --backend openai --api-key sk-SECRET-2 --backend-arg hf_token=hf_SECRET_1 "
           "--backend-arg=password=pw-SECRET-3 --backend-arg 'extra_body={\"api_key\": \"sk-SECRET-2\"}' "
           "--base-url https://me:pw-SECRET-3@host/v1 --max-tokens 800")


def leaks(root: Path) -> list[str]:
    """Files under ``root`` (json, yaml, cards, parquet metadata: every byte) that hold one of the secrets."""
    found = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p.relative_to(root)}: {k}" for k, v in SECRETS.items() if v.encode() in data]
    return found


# -- the rule ------------------------------------------------------------------------------------------------------
def test_one_rule_names_the_secrets():
    for name in ("api_key", "hf_token", "password", "HF_TOKEN", "--hf-token", "hubToken", "grpo.hub_token",
                 "aws_secret_access_key", "Authorization", "credentials", "passwd", "key", "token"):
        assert is_secret(name) and is_secret_option(name), name
    for name in ("tokenizer", "max_tokens", "max_new_tokens", "keep_completions", "model", "base_url", "monkey",
                 "tokens", "k", "seed"):
        assert not is_secret(name) and not is_secret_option(name), name


def test_the_command_line_and_overrides_are_masked_by_the_same_rule():
    red = redact_command(COMMAND)
    assert not [v for v in SECRETS.values() if v in red], red
    assert "--max-tokens 800" in red and "--backend openai" in red and "https://***@host/v1" in red
    assert redact_command("curriculum eval --api-key=sk-SECRET-2 --model m") == "curriculum eval '--api-key=***' --model m"
    assert redact_overrides(["grpo.hub_token=hf_SECRET_1", "+model.password=pw", "grpo.beta=0.01"]) == [
        "grpo.hub_token=***", "+model.password=***", "grpo.beta=0.01"]
    assert mask_secrets({"a": [{"hf_token": "x"}], "extra_body": '{"api_key": "k"}'}) == {
        "a": [{"hf_token": "***"}], "extra_body": '{"api_key": "***"}'}


def test_backend_identity_leaves_nested_secrets_out():
    ident = backend_identity("openai", "m", {**SECRETS, "extra_body": {"api_key": "sk-SECRET-2", "top_k": 3}})
    assert "sk-SECRET-2" not in json.dumps(ident) and ident["options"]["extra_body"] == {"api_key": "***", "top_k": 3}


# -- partition -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("trust") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=3)], schedule="max",
                                 out=str(out), seed=0), command="t")
    return out


class Describing(ScriptedBackend):
    """A scripted backend whose describe() carries secrets (as an engine's resolved options might)."""

    def describe(self):
        return {**super().describe(), "engine": {"hf_token": SECRETS["hf_token"], "dtype": "float32"},
                "password": SECRETS["password"]}


def test_no_secret_in_any_file_a_partition_writes(max_dir, tmp_path):
    args = {**SECRETS, "extra_body": {"api_key": SECRETS["api_key"]}, "base_url": "https://me:pw-SECRET-3@host/v1"}
    cfg = PartitionConfig(shards=str(max_dir), out=str(tmp_path / "p"), backend="scripted", samples=2, chunk_size=4,
                          backend_args=args)
    res = partition(cfg, backend=Describing(script={}, default="Final answer: x"), command=COMMAND)
    assert res.complete
    assert leaks(tmp_path / "p") == []
    summary = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert summary["config"]["backend_args"]["hf_token"] == "***"
    assert summary["config"]["backend_args"]["extra_body"] == {"api_key": "***"}
    assert "--backend-arg hf_token=***" in summary["command"].replace("'", "")
    backend_json = json.loads((tmp_path / "p" / "work" / "backend.json").read_text())
    assert backend_json["engine"] == {"hf_token": "***", "dtype": "float32"}
    manifest = json.loads((tmp_path / "p" / "answerable" / "manifest.json").read_text())
    assert manifest["config"]["backend_args"]["password"] == "***"


def test_balance_with_nothing_answerable_warns_in_one_line(max_dir, tmp_path, caplog):
    cfg = PartitionConfig(shards=str(max_dir), out=str(tmp_path / "p"), backend="scripted", samples=2, balance=True)
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        res = partition(cfg, backend=ScriptedBackend(script={}, default="Final answer: zzzq"), command="t")
    assert res.counts["answerable"] == 0 and res.counts["unanswerable"] == 6
    msgs = [r.getMessage() for r in caplog.records if "--balance" in r.getMessage()]
    assert len(msgs) == 1 and "\n" not in msgs[0]
    assert "no question is answerable" in msgs[0] and "0 rows" in msgs[0] and "without --balance" in msgs[0]


# -- the progress bar ----------------------------------------------------------------------------------------------
class SpyBar:
    instances: list[SpyBar] = []

    def __init__(self, enabled, description, *, total_questions, done_questions, todo_completions, heartbeat=False):
        self.events: list[tuple[str, int]] = []
        SpyBar.instances.append(self)

    def advance(self, questions, completions):
        self.events.append(("advance", questions))

    def call(self, backend, call, n):  # the line under the bar while a call runs: not what these tests count
        return contextlib.nullcontext()

    def close(self):
        pass


class Streaming:
    """A backend that streams (like the OpenAI-compatible one): one result per prompt, in any order."""

    name = "streaming"

    def __init__(self, events):
        self.events = events

    def generate(self, prompts, sampling):  # pragma: no cover - the runner streams
        raise AssertionError("streamed")

    def generate_iter(self, prompts, sampling, *, seeds=None):
        order = list(range(len(prompts)))
        random.Random(0).shuffle(order)
        for i in order:
            yield i, [f"sample {i} {j}" for j in range(sampling.n)]


def _prompts(n):
    return [f"q{i}" for i in range(n)], [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


def test_the_bar_advances_per_question_as_streamed_results_come(tmp_path, monkeypatch):
    SpyBar.instances.clear()
    monkeypatch.setattr(runner, "_Bar", SpyBar)
    events: list = []
    ids, prompts = _prompts(8)
    orig = runner.WorkDir.write_chunk
    monkeypatch.setattr(runner.WorkDir, "write_chunk",
                        lambda self, k, t: (SpyBar.instances[-1].events.append(("write", k)), orig(self, k, t)))
    rep = runner.run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=Streaming(events),
                            sampling=SamplingConfig(n=2, temperature=0), fingerprint={"t": 1}, chunk_size=8,
                            progress=True)
    assert rep.complete
    ev = SpyBar.instances[-1].events
    assert ev == [("advance", 1)] * 8 + [("write", 0)]  # 8 steps before the one chunk lands, not one at the end


def test_the_bar_advances_per_call_for_call_based_backends(tmp_path, monkeypatch):
    SpyBar.instances.clear()
    monkeypatch.setattr(runner, "_Bar", SpyBar)
    ids, prompts = _prompts(6)
    backend = ScriptedBackend(script={}, default="Final answer: x")
    rep = runner.run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=backend,
                            sampling=SamplingConfig(n=2, temperature=0), fingerprint={"t": 1}, chunk_size=2,
                            chunks_per_call=1, progress=True)
    assert rep.complete and SpyBar.instances[-1].events == [("advance", 2)] * 3


# -- eval ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_no_secret_in_any_file_an_eval_writes(shared_data, tmp_path):
    from rag_curriculum.evaluation import EvalConfig, ModelSpec, run_eval

    ev = tmp_path / "ev"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), n=3)], setting="ideal",
                                 out=str(ev)), command="t")
    args = {**SECRETS, "extra_body": {"api_key": SECRETS["api_key"]}}
    cfg = EvalConfig(models=[ModelSpec.parse("base=org/base")], data=[str(ev)], out=str(tmp_path / "run"), m=2,
                     backend="scripted", backend_args=args)
    run_eval(cfg, command=COMMAND.replace("partition max", "eval"),
             backend_factory=lambda m: Describing(script={}, default="Final answer: x"))
    assert leaks(tmp_path / "run") == []
    saved = json.loads((tmp_path / "run" / "eval_config.json").read_text())
    assert saved["config"]["backend_args"] == {"hf_token": "***", "api_key": "***", "password": "***",
                                               "extra_body": {"api_key": "***"}}


# -- training ------------------------------------------------------------------------------------------------------
def test_cpu_recipe_composes_and_binds():
    pytest.importorskip("trl")
    from rag_curriculum.train import check_recipe, compose_train_config
    from rag_curriculum.train._trl import CPU_HINT

    cfg = compose_train_config("cpu-tiny", ["data.shards=somewhere"])
    args, plan = check_recipe(cfg, num_rows=8)
    assert not args.bf16 and not args.use_vllm and args.max_steps == 3
    assert plan.prompts_per_generation == 2 and args.num_generations == 2
    assert "recipe=cpu-tiny" in CPU_HINT


@pytest.mark.slow
def test_cpu_recipe_trains_masks_secrets_and_says_it_resumes(tiny_model_dir, shared_data, tmp_path, caplog,
                                                              capsys):
    """The shipped CPU recipe trains the tiny model (2 steps, then 1 more resumed); the run's files keep no
    secret given as an override; the resumed run says where it resumes from; each step is logged as one compact
    line with its numbers, not TRL's dict of quoted numbers."""
    pytest.importorskip("trl")
    import torch

    from rag_curriculum.train import compose_train_config, train

    shards = tmp_path / "musique-cpu-tiny"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=8)], schedule="min-max", K=3,
                                 out=str(shards), seed=0), command="t")
    out = tmp_path / "run"
    overrides = [f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}", f"run.output_dir={out}",
                 "grpo.max_steps=2", "grpo.save_steps=2", f"grpo.hub_token={SECRETS['hf_token']}"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = train(compose_train_config("cpu-tiny", overrides), overrides=["recipe=cpu-tiny", *overrides])
        assert result.global_step == 2
        overrides[3:5] = ["grpo.max_steps=3", "grpo.save_steps=3"]
        with caplog.at_level(logging.INFO, logger="rag_curriculum"):
            result = train(compose_train_config("cpu-tiny", overrides), overrides=["recipe=cpu-tiny", *overrides])
    finally:
        torch.set_num_threads(threads)
    assert result.global_step == 3
    printed = capsys.readouterr()
    steps = [line for line in (printed.out + printed.err).splitlines() if line.startswith("step ")]
    assert steps and all(len(line) < 200 for line in steps), steps
    assert any(" loss " in line and " reward " in line for line in steps), steps
    assert "'loss'" not in printed.out + printed.err
    lines = [r.getMessage() for r in caplog.records if "resuming from checkpoint" in r.getMessage()]
    assert len(lines) == 1 and "checkpoint-2" in lines[0] and "(step 2)" in lines[0]
    files = ["train_config.yaml", "train_plan.json", "checkpoint-3/curriculum_plan.json"]  # save_total_limit=1 keeps the last
    for f in files:
        assert (out / f).exists(), f
        assert SECRETS["hf_token"] not in (out / f).read_text(), f
    assert "hub_token: '***'" in (out / "train_config.yaml").read_text()
