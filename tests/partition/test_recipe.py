"""`curriculum partition` on the one config layer: recipe=rag-rl-pass8 plus key=value overrides (the positional
SHARDS still works), the options' help read from PartitionConfig's fields, and "did you mean" on unknown keys."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.config import bind, compose, field_help, list_recipes
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.errors import ConfigError
from rag_curriculum.partition import PartitionConfig
from rag_curriculum.shards import read_manifest, read_rows, read_table

N, LEVEL, K_SAMPLES = 8, 3, 4
#: Correct samples per question, by input position (every bucket is reached).
C = [0, 1, 4, 2, 0, 3, 0, 4]


def right(answer: str) -> str:
    return f"<reasoning>\nr\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: 1\n</answer>"


def script_for(rows: list[dict], path: Path) -> Path:
    """A scripted base model as a JSON file: question i is answered right in its first C[i] samples."""
    script = {r["prompt"][-1]["content"]: [right(r["answers"][0]) if j < C[i] else right("zzzq")
                                           for j in range(K_SAMPLES)] for i, r in enumerate(rows)}
    path.write_text(json.dumps(script), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    """What `curriculum partition dataset=musique input=... n=N K=LEVEL` builds into OUT/input (same seed)."""
    out = tmp_path_factory.mktemp("max") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N, K=LEVEL)], schedule="max",
                                 out=str(out), seed=0, overwrite=True, allow_split_mismatch=True),
                     command="curriculum build (test)")
    return out


@pytest.fixture(scope="module")
def script(max_dir, tmp_path_factory) -> Path:
    return script_for(read_rows(max_dir), tmp_path_factory.mktemp("script") / "script.json")


@pytest.fixture(scope="module")
def cli():
    from rag_curriculum.cli import app  # the real `curriculum` command

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def test_the_recipe_is_the_papers_partition():
    assert list_recipes("partition") == ["rag-rl-pass8"]
    data = compose("partition", "rag-rl-pass8")
    cfg = bind(PartitionConfig, data)
    assert (cfg.samples, cfg.temperature, cfg.max_tokens, cfg.correct_f1, cfg.balance, cfg.K, cfg.n) == (
        8, 1.0, 800, 1.0, True, None, 40_000)
    assert (cfg.dataset, cfg.model, cfg.out) == ("musique", "Qwen/Qwen2.5-7B-Instruct", "outputs/musique-partition")
    assert compose("partition", "rag-rl-pass8", ["dataset=hotpotqa"])["out"] == "outputs/hotpotqa-partition"
    assert set(data) == {f.name for f in dataclasses.fields(PartitionConfig)}  # every field, so any can be overridden
    from rag_curriculum.config import recipe_path

    header = [line for line in recipe_path("partition", "rag-rl-pass8").read_text().splitlines()
              if line.startswith("#")]
    assert any("curriculum partition recipe=rag-rl-pass8" in line for line in header)
    assert any("From the paper" in line for line in header) and any("our choice" in line for line in header)


@pytest.mark.slow
def test_recipe_with_shards_and_overrides(cli, max_dir, script, tmp_path):
    """SHARDS + recipe=rag-rl-pass8 + key=value overrides + an option: the shard directory replaces the recipe's
    dataset, overrides beat the recipe, options beat both; the statistics are those of the same run given by flags."""
    out = tmp_path / "p"
    r = cli("partition", max_dir, "recipe=rag-rl-pass8", "backend=scripted", f"model={script}", f"samples={K_SAMPLES}",
            "chunk_size=3", "seed=5", f"out={out}", "--seed", 0, "--no-progress")
    assert r.exit_code == 0, r.output
    m = read_manifest(out / "answerable")
    cfg = m["config"]
    assert Path(cfg["shards"]).name == max_dir.name and (cfg["dataset"], cfg["input"]) == (None, None)
    assert (cfg["samples"], cfg["chunk_size"], cfg["seed"], cfg["balance"], cfg["max_tokens"], cfg["temperature"]) == (
        K_SAMPLES, 3, 0, True, 800, 1.0)
    answerable, unanswerable = (read_table(out / b).num_rows for b in ("answerable", "unanswerable"))
    assert answerable == unanswerable == min(sum(c > 0 for c in C), sum(c == 0 for c in C))  # balanced
    flags = tmp_path / "flags"
    r = cli("partition", max_dir, "--backend", "scripted", "--model", script, "--pass-at", K_SAMPLES, "--chunk-size",
            3, "--balance", "--out", flags, "--no-progress")
    assert r.exit_code == 0, r.output
    assert (out / "stats.parquet").read_bytes() == (flags / "stats.parquet").read_bytes()
    assert read_manifest(flags / "answerable")["config"]["n"] is None  # flags alone: the dataclass defaults


@pytest.mark.slow
def test_recipe_builds_level_K_from_an_input_file(cli, max_dir, script, tmp_path):
    out = tmp_path / "p"
    r = cli("partition", "recipe=rag-rl-pass8", f"input={MUSIQUE_TRAIN}", f"n={N}", f"K={LEVEL}", "backend=scripted",
            f"model={script}", f"samples={K_SAMPLES}", f"out={out}", "--no-progress")
    assert r.exit_code == 0, r.output
    built = read_manifest(out / "input")
    assert built["config"]["schedule"] == "max" and set(built["counts"]["levels"]) == {str(LEVEL)}
    assert read_table(out / "input", columns=["id"]).equals(read_table(max_dir, columns=["id"]))
    import pyarrow.parquet as pq

    assert pq.read_table(out / "stats.parquet").column("c").to_pylist() == C


@pytest.mark.parametrize(("args", "words"), [
    (["recipe=rag-rl-pass8", "sampels=4"], ["unknown option 'sampels'", "did you mean 'samples'?"]),
    (["recipe=rag-rl-pass8", "balanse=true"], ["unknown option 'balanse'", "did you mean 'balance'?"]),
    (["recipe=rag-rl-pas8"], ["unknown partition recipe 'rag-rl-pas8'", "did you mean 'rag-rl-pass8'?"]),
    (["samples=4"], ["key=value overrides need a recipe"]),
    (["a", "b"], ["one shard directory, got 2"]),
])
def test_unknown_keys_and_bad_arguments_are_one_line(cli, tmp_path, args, words):
    r = cli("partition", *args, "--backend", "scripted", "-o", tmp_path / "p")
    assert r.exit_code == 2, r.output
    first = r.output.strip().splitlines()[0]
    assert first.startswith("error:"), r.output
    for w in words:
        assert w in first, (w, r.output)
    assert not (tmp_path / "p").exists()


def test_bind_says_did_you_mean_for_an_unknown_partition_key():
    with pytest.raises(ConfigError, match=r"^unknown option 'balanse' in the partition config; did you mean "
                       r"'balance'\? Known: K, agent, allow_identical_samples, backend, "):
        bind(PartitionConfig, {"shards": "x", "balanse": True})
    with pytest.raises(ValueError, match="did you mean 'correct_f1'"):  # a ConfigError is a ValueError
        bind(PartitionConfig, {"shards": "x", "corect_f1": 1.0})


def test_every_option_reads_its_help_from_the_field():
    from typer.main import get_command

    from rag_curriculum._cli.partition import CLI_ONLY, register

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    register(app)
    cmd = get_command(app).commands["partition"]
    fields = {f.name for f in dataclasses.fields(PartitionConfig)}
    renamed = {"out_dir": "out", "input_file": "input", "pass_at": "k"}
    options = {renamed.get(p.name, p.name): p for p in cmd.params if p.name not in CLI_ONLY}
    assert len(fields) == 37 and len(options) == 33
    # SHARDS, --backend-arg, and two recipe keys only
    assert fields - set(options) == {"shards", "backend_args", "rows_per_shard", "react_sentences"}
    for name, p in options.items():
        assert field_help(PartitionConfig, name) and p.help.startswith(field_help(PartitionConfig, name)), name
    assert all(field_help(PartitionConfig, f) for f in fields)  # every field says what it is for
