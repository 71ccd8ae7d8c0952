"""Settings: every impossible value is refused once, at config binding, by the same rules for flags,
recipes and Python, with one line that names the setting, the value and what is allowed; errors are one line
(no traceback, no stray colon, no second ``error: 1``, install extras printed as they are)."""

from __future__ import annotations

import errno

import pytest
import typer
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum._settings import MAX_SAMPLES, check_model_ref
from rag_curriculum.cli import app
from rag_curriculum.curricula._config import BuildConfig, SourceSpec
from rag_curriculum.errors import CurriculumError, SettingError, UsageError
from rag_curriculum.evaluation import EvalConfig
from rag_curriculum.partition import PartitionConfig

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_lines(r) -> list[str]:
    return [line for line in r.output.splitlines() if line.startswith("error:")]


def assert_one_line(r, *words, code=2):  # 2: a usage error (a bad value, an unknown option or name)
    assert r.exit_code == code, (r.output, r.exception)
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit), r.exception  # not a crash
    lines = error_lines(r)
    assert len(lines) == 1, r.output  # one line, never a second "error: 1"
    assert "error: :" not in r.output
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def build_args(tmp_path, *extra):
    return ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 5, "-o", tmp_path / "out", "--no-progress", *extra]


@pytest.mark.parametrize("flag, value, words", [
    ("--rows-per-shard", -5, ["rows_per_shard (--rows-per-shard) = -5", "1..10_000_000"]),
    ("--rows-per-shard", 0, ["--rows-per-shard", "= 0", "1..10_000_000"]),
    ("--max-distractors", -1, ["--max-distractors", "= -1", "0..1000"]),
    ("--K", "99999999999999999999999", ["--K", "99999999999999999999999", "1..1000"]),
    ("--n", "abc", ["--n", "'abc'", "'all'"]),
    ("--workers", 0, ["--workers", "1..1024"]),
    ("--seed", -1, ["--seed", "0..2**63-1"]),
    ("--setting", "distracter", ["--setting", "one of curriculum, distractor, ideal", "did you mean 'distractor'"]),
])
def test_build_flags_out_of_range_are_refused(shared_data, tmp_path, flag, value, words):
    r = invoke(*build_args(tmp_path, flag, value))
    assert_one_line(r, *words)
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("override, words", [
    ("seed=hello", ["seed (--seed) = 'hello'", "an integer in 0..2**63-1"]),
    ("seed=${oc.env:PATH}", ["seed (--seed) = '", "an integer"]),
    ("n=[1,2]", ["n (--n) = [1, 2]", "an integer"]),
    ("n=1e999", ["n (--n) = inf", "an integer"]),
    ("rows_per_shard=-5", ["rows_per_shard (--rows-per-shard) = -5", "1..10_000_000"]),
    ("max_distractors=-1", ["max_distractors (--max-distractors) = -1"]),
    ("overwrite=maybe", ["overwrite", "true or false"]),
])
def test_recipe_overrides_are_type_checked(shared_data, tmp_path, override, words):
    r = invoke("build", "recipe=musique-max", f"input={MUSIQUE_TRAIN}", override, f"out={tmp_path / 'out'}",
               "--no-progress")
    assert_one_line(r, *words)
    assert not (tmp_path / "out").exists()


def test_flags_recipes_and_python_share_one_rule(shared_data, tmp_path):
    by_flag = error_lines(invoke(*build_args(tmp_path, "--rows-per-shard", -5)))
    by_recipe = error_lines(invoke("build", "recipe=musique-max", f"input={MUSIQUE_TRAIN}", "rows_per_shard=-5",
                                   "--no-progress"))
    with pytest.raises(SettingError) as e:
        BuildConfig(sources=[SourceSpec("musique")], rows_per_shard=-5)
    assert by_flag == by_recipe == [f"error: {e.value}"]
    assert isinstance(e.value, CurriculumError) and isinstance(e.value, ValueError)
    with pytest.raises(SettingError, match="n .* = 0"):
        SourceSpec("musique", n=0)
    with pytest.raises(SettingError, match="seed"):
        BuildConfig(sources=[SourceSpec("musique")], seed=True)  # a bool is not an integer


def test_mistyped_recipe_key_names_the_known_ones(shared_data):
    r = invoke("build", "recipe=musique-max", f"input={MUSIQUE_TRAIN}", "nn=3", "--no-progress")
    line = assert_one_line(r, "'nn'", "did you mean 'n'?", "Known:", "rows_per_shard")
    assert "+nn" not in r.output  # not Hydra's "use +nn=3"
    r = invoke("train", "recipe=rag-rl-min-max", "data.shard=x", "--dry-run")
    assert_one_line(r, "'data.shard'", "did you mean 'data.shards'?", "Known under 'data'")
    assert "+data.shard" not in r.output
    assert line


def test_partition_settings(tmp_path):
    for kw, words in [(dict(samples=100_000_000_000), ["samples (--pass-at) = 100000000000", f"1..{MAX_SAMPLES}"]),
                      (dict(temperature=float("nan")), ["temperature", "nan"]),
                      (dict(top_p=0), ["top_p", "(0, 1]"]), (dict(seed="x"), ["seed"]),
                      (dict(chunk_size=0), ["chunk_size"]), (dict(n=-1), ["n (--n) = -1"])]:
        with pytest.raises(SettingError) as e:
            PartitionConfig(shards="x", backend="scripted", **kw)
        for w in words:
            assert w in str(e.value), (w, str(e.value))
    r = invoke("partition", tmp_path, "--backend", "scripted", "-k", 100_000_000_000, "-o", tmp_path / "p")
    assert_one_line(r, "--pass-at", "1..1024")
    r = invoke("partition", tmp_path, "--backend", "scripted", "--max-chunks", -1, "-o", tmp_path / "p")
    assert_one_line(r, "max_chunks (--max-chunks) = -1")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("model, says", [("Qwn/x/y", "not a local directory and not a valid Hub id"),
                                         ("../no/such-model", "no such folder"), ("./nope", "no such folder")])
def test_mistyped_model_is_one_line_before_loading(tmp_path, model, says):
    r = invoke("partition", tmp_path, "--backend", "transformers", "--model", model, "-o", tmp_path / "p")
    assert_one_line(r, f"model {model!r}: {says}")
    r = invoke("eval", "--model", f"m={model}", "-D", tmp_path, "--backend", "transformers", "-o", tmp_path / "e")
    assert_one_line(r, f"model m {model!r}: {says}")
    r = invoke("train", "recipe=rag-rl-min-max", f"model.name_or_path={model}", "--dry-run")
    assert_one_line(r, f"model.name_or_path {model!r}: {says}")


def test_a_missing_local_model_is_named_even_where_it_reads_as_a_hub_id(tmp_path, monkeypatch):
    """Outputs/tiny-model (a valid Hub id) when ./outputs exists is this machine's missing folder,
    named as such, not sent to the Hub."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    with pytest.raises(SettingError, match=r"'outputs/tiny-model': no such folder") as e:
        check_model_ref("outputs/tiny-model", backend="transformers")
    assert "curriculum warm-start" in e.value.hint
    check_model_ref("Qwen/Qwen2.5-0.5B-Instruct", backend="transformers")  # no ./Qwen here: a Hub id


def test_model_refs():
    check_model_ref("Qwen/Qwen2.5-7B-Instruct", backend="vllm")  # a Hub id
    check_model_ref("anything at all", backend="openai")  # a served model's name
    check_model_ref(str(MUSIQUE_TRAIN.parent), backend="transformers")  # an existing path
    with pytest.raises(SettingError, match="not a local directory"):
        check_model_ref("a/b/c", backend="vllm")


def test_eval_model_with_path_like_name_is_one_line(tmp_path):
    r = invoke("eval", "--model", "../x=...", "--data", tmp_path, "-o", tmp_path / "e")
    assert_one_line(r, "'../x=...'", "no such folder")


def test_eval_short_data_option_and_default_backend(tmp_path):
    assert EvalConfig().backend == PartitionConfig().backend == "vllm"
    r = invoke("eval", "--help")
    assert "-D" in r.output and "the CPU choice" in r.output
    assert "the CPU choice" in invoke("partition", "--help").output
    # -d (the old short form) still works, with a note that it is deprecated
    r = invoke("eval", "--model", "m=a/b/c", "-d", tmp_path, "--backend", "transformers", "-o", tmp_path / "e")
    assert "-d is deprecated" in r.output and "use -D or --data" in r.output
    assert_one_line(r, "model m 'a/b/c'")
    with pytest.raises(SettingError, match=r"m \(--samples\) = 0"):
        EvalConfig(m=0)
    with pytest.raises(SettingError, match="limit"):
        EvalConfig(limit=-3)


def test_eval_compare_refuses_unknown_sections(monkeypatch, tmp_path):
    import rag_curriculum._cli.evaluate as evaluation  # the command's own name for it (imported at its top)

    agg = {"answer_f1": 0.5, "citation_f1": 0.5, "joint_f1": 0.5}
    merged = {"runs": ["a"], "sampling": None, "evals": [
        {"model": "a/base", "dataset": "musique", "setting": "distractor", "overall": agg,
         "by_hops": {"2": agg, "3": agg}, "by_format": {"valid": agg}}]}
    monkeypatch.setattr(evaluation, "compare_summaries", lambda runs, names=None: merged)
    monkeypatch.setattr(evaluation, "paired_across_runs", lambda merged: {})  # one run: nothing to pair
    r = invoke("eval", "compare", tmp_path, "--section", "by_hop.3")
    assert_one_line(r, "--section 'by_hop.3'", "did you mean 'by_hops.3'?", "by_format.valid")
    r = invoke("eval", "compare", tmp_path, "--section", "by_hops.3")
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_train_dry_run_checks_reward_names():
    r = invoke("train", "recipe=rag-rl-min-max", "rewards.0.name=rag-rl-anwser", "--dry-run")
    assert_one_line(r, "rewards.0.name", "did you mean 'rag-rl-answer'?")
    assert "ok" not in r.output.split("error:")[-1]
    r = invoke("train", "recipe=rag-rl-min-max", "data.max_rows=0", "--dry-run")
    assert_one_line(r, "data.max_rows = 0")


def test_validate_says_not_found_or_not_a_shard_directory(tmp_path):
    r = invoke("validate", tmp_path / "nowhere")
    assert_one_line(r, "not found", code=1)
    assert "interrupted" not in r.output
    (tmp_path / "notes.txt").write_text("x")
    r = invoke("validate", tmp_path)
    assert_one_line(r, "not a shard directory (no manifest.json)", code=1)
    assert "interrupted" not in r.output


def _app_raising(exc: BaseException) -> typer.Typer:
    from rag_curriculum._cli.common import reported_errors

    demo = typer.Typer()

    @demo.command()
    def go() -> None:
        with reported_errors():
            raise exc

    @demo.command()
    def other() -> None:
        pass

    return demo


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.ENOSPC, "No space left on device", "/out/answerable/part-00000.parquet"),
     ["error: /out/answerable/part-00000.parquet: No space left on device"]),
    (PermissionError(errno.EACCES, "Permission denied", "/ro/p"), ["error: /ro/p: Permission denied"]),
    (OSError(errno.ENOSPC, "No space left on device"), ["error: No space left on device"]),
    (CurriculumError("needs vLLM: pip install 'rag-curriculum[vllm]'"), ["'rag-curriculum[vllm]'"]),
    (KeyError("unknown thing 'x'; did you mean 'y'?"), ["error: unknown thing 'x'; did you mean 'y'?"]),
    (ValueError("two\nlines"), ["error: two lines"]),
])
def test_one_error_handler(exc, words):
    r = runner.invoke(_app_raising(exc), ["go"])
    assert_one_line(r, *words, code=1)
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        assert "free some space" in r.output


def test_partition_write_failure_is_one_line(monkeypatch, tmp_path):
    import rag_curriculum._cli.partition as command
    import rag_curriculum.partition as part

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "p" / "unanswerable"))

    monkeypatch.setattr(command, "run_partition", full_disk)  # the command's name for it (imported at its top)
    monkeypatch.setattr(part.PartitionConfig, "validate", lambda self: None)
    r = invoke("partition", tmp_path, "--backend", "scripted", "-o", tmp_path / "p")
    assert_one_line(r, f"{tmp_path / 'p' / 'unanswerable'}: No space left on device", code=1)


def test_train_recipe_types_via_omegaconf_and_bounds():
    from rag_curriculum.train import compose_train_config

    cfg = compose_train_config("rag-rl-min-max", ["batch.num_processes=0"])
    with pytest.raises(SettingError, match=r"batch.num_processes = 0"):
        cfg.validate()
    with pytest.raises(UsageError, match=r"rewards.0.weight = inf is not a finite number"):  # refused as it enters
        compose_train_config("rag-rl-min-max", ["rewards.0.weight=inf"])
