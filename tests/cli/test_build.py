"""The `curriculum` command for build / inspect / validate, and the shipped build recipes."""

from __future__ import annotations

import json

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, MUSIQUE_TRAIN, TWOWIKI_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.config import compose, list_recipes, recipes_root
from rag_curriculum.curricula import BuildConfig
from rag_curriculum.shards import read_manifest, read_rows

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.slow
def test_build_validate_inspect(shared_data, tmp_path, monkeypatch):
    import shlex
    import sys

    out = tmp_path / "c"
    args = ["build", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--schedule", "min-max", "--K", 20,
            "--n", 30, "--seed", 1, "--out", out, "--no-progress", "-P", 18]
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/curriculum", *map(str, args)])  # as a shell would start it
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "wrote 30 rows" in r.output and "12 row(s) never seen" in r.output
    m = read_manifest(out)
    assert m["config"]["seed"] == 1 and m["counts"]["levels"] == {"1": 15, "20": 15}
    # the command that made it, recorded (its paths made relative to the output, so the shards can move)
    assert m["command"].startswith("curriculum build --dataset musique --input ")
    assert m["command"].endswith(shlex.join(["--schedule", "min-max", "--K", "20", "--n", "30", "--seed", "1",
                                             "--out", "c", "--no-progress", "-P", "18"]))
    monkeypatch.undo()
    r = run("validate", out)
    assert r.exit_code == 0 and "valid" in r.output
    r = run("inspect", out)
    assert r.exit_code == 0 and "0..14" in r.output and "15..29" in r.output
    # refuses to overwrite, then overwrites
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 10, "-o", out, "--no-progress")
    assert r.exit_code == 1 and "--overwrite" in r.output
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 10, "-o", out, "--no-progress", "--overwrite")
    assert r.exit_code == 0 and len(read_rows(out)) == 10


def test_validate_fails_on_incomplete_directory(tmp_path):
    d = tmp_path / "half"
    d.mkdir()
    (d / "part-00000.parquet").write_bytes(b"PAR1")
    r = run("validate", d)
    assert r.exit_code == 1 and "no manifest.json" in r.output


def test_inspect_source_file_json(shared_data):
    r = run("inspect", TWOWIKI_TRAIN, "--json")
    assert r.exit_code == 0
    s = json.loads(r.output)
    assert s["dataset"] == "2wikimultihopqa" and s["records"] == 500
    assert s["hops"] == {"2": 408, "4": 92}
    assert s["questions_with_repeated_titles"] == 23
    assert s["supporting_facts_sentence_out_of_range"] == 6
    assert s["paragraphs_per_question"] == {"10": 500}
    assert s["skipped"] == {}
    r = run("inspect", HOTPOT_HUB, "--dataset", "hotpotqa", "--json")
    s = json.loads(r.output)
    assert s["records"] == 300 and s["split"] == "dev" and s["distractors_per_question"]["8"] == 297


def test_inspect_reports_skipped_records(tmp_path, shared_data):
    lines = MUSIQUE_TRAIN.read_text().splitlines()[:5]
    p = tmp_path / "musique_ans_v1.0_train.jsonl"
    p.write_text("\n".join([lines[0], "{broken", *lines[1:]]) + "\n")
    r = run("inspect", p, "--json", "--on-error", "skip")
    s = json.loads(r.output)
    assert s["records"] == 5 and s["skipped"] == {"invalid_json": 1}
    r = run("inspect", p)
    assert r.exit_code == 1 and "line 2" in r.output and "--on-error skip" in r.output


def test_wrong_dataset_message(shared_data):
    r = run("inspect", MUSIQUE_TRAIN, "--dataset", "hotpotqa")
    assert r.exit_code == 1 and "looks like a 'musique' file" in r.output


@pytest.mark.slow
def test_build_from_recipe_with_overrides(shared_data, tmp_path):
    out = tmp_path / "r"
    r = run("build", "recipe=musique-linear", f"input={MUSIQUE_TRAIN}", "n=40", "seed=2", f"out={out}",
            "--no-progress")
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m["config"]["schedule"] == "linear" and m["K"] == {"musique": 20} and m["config"]["seed"] == 2
    assert m["counts"]["levels"] == {str(lv): 2 for lv in range(1, 21)}
    r = run("build", "recipe=musique-linar")
    assert r.exit_code == 2 and "did you mean 'musique-linear'" in r.output


@pytest.mark.slow
def test_build_mixture_from_options(shared_data, tmp_path):
    out = tmp_path / "mix"
    r = run("build", "-d", "musique:20", "-d", "2wiki:10", "-i", MUSIQUE_TRAIN, "-i", TWOWIKI_TRAIN, "-o", out,
            "--no-progress")
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["counts"]["sources"] == {"2wikimultihopqa": 10, "musique": 20}


def test_build_help_explains():
    r = run("build", "--help")
    assert r.exit_code == 0
    for word in ("--schedule", "--K", "--n", "--setting", "recipe=NAME", "--batch-prompts", "--leakage"):
        assert word in r.output


EXPECTED_BUILD_RECIPES = 24  # + musique-adaptive, mixture-craft-v1, DATASET-bm25-min-max, DATASET-eval-retrieved


@pytest.mark.slow
def test_every_build_recipe_resolves_to_a_valid_config():
    names = list_recipes("build")
    assert len(names) == EXPECTED_BUILD_RECIPES, names
    assert (recipes_root() / "build" / "_base.yaml").exists()
    for name in names:
        needs_index = "bm25" in name or "retrieved" in name
        mapping = compose("build", name, (["input=x.json"] if "mixture" not in name else [])
                          + (["index=idx"] if needs_index else []))
        cfg = BuildConfig.from_dict(mapping)
        cfg.validate()
        assert cfg.template == ("craft-v1" if name == "mixture-craft-v1" else "rag-rl")
        if "eval" in name:
            assert cfg.setting in ("distractor", "ideal", "retrieved") and cfg.sources[0].n == 1000
            assert (cfg.setting == "retrieved") == ("retrieved" in name)
        elif "mixture" not in name:
            ds, sched = name.split("-", 1)
            if sched.startswith("bm25-"):
                assert cfg.distractors == "bm25" and cfg.index == "idx"
                sched = sched[len("bm25-"):]
                assert cfg.out == f"outputs/{ds}-bm25-{sched}"
                cfg.out = f"outputs/{ds}-{sched}"
            assert cfg.schedule == sched and cfg.sources[0].n == 5000
            assert cfg.K == {"hotpotqa": 10, "musique": 20, "2wikimultihopqa": 10}[ds]
            assert cfg.out == f"outputs/{ds}-{sched}"


@pytest.mark.parametrize("bad, words", [
    (["--n", "many"], ["--n", "'many'", "'all'"]),
    (["--schedule", "linaer"], ["linaer", "did you mean 'linear'"]),
    (["--order", "random"], ["--order", "'random'", "one of level, shuffled, hops-level"]),
])
def test_bad_options_say_what_to_do(shared_data, tmp_path, bad, words):
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", tmp_path / "x", "--no-progress", *bad)
    assert r.exit_code == 2  # a usage error, as click's own
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output  # one line: never a second, bare "error: 1"
    assert "error: 1" not in r.output
    for w in words:
        assert w in errors[0], (w, errors[0])


@pytest.mark.slow
def test_n_applies_to_every_source_of_a_mixture_recipe(shared_data, tmp_path):
    out = tmp_path / "mix"
    r = run("build", "recipe=mixture-craft", f"sources.0.input={MUSIQUE_TRAIN}", f"sources.1.input={HOTPOT_TRAIN}",
            f"sources.2.input={TWOWIKI_TRAIN}", "--n", 7, "-o", out, "--no-progress")
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["counts"]["sources"] == {"2wikimultihopqa": 7, "hotpotqa": 7, "musique": 7}


def test_recipe_K_does_not_follow_another_dataset(shared_data, tmp_path):
    out = tmp_path / "h"
    r = run("build", "recipe=musique-min-max", "-d", "hotpotqa", "-i", HOTPOT_TRAIN, "--n", 10, "-o", out,
            "--no-progress")
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["K"] == {"hotpotqa": 10}


def test_help_shows_defaults():
    r = run("build", "--help")
    for default in ("[default: min-max]", "[default: 0]", "[default: 18]", "[default: level]"):
        assert default in r.output, default


def test_ordinary_mistakes_get_errors_not_tracebacks(shared_data, tmp_path):
    (tmp_path / "afile").write_text("x")
    for args in (["-o", tmp_path / "afile"], ["-o", tmp_path / "afile" / "x"], ["-i", tmp_path]):
        base = ["build", "-d", "musique", "--n", 3, "--no-progress"]
        if "-i" not in args:
            base += ["-i", MUSIQUE_TRAIN]
        r = runner.invoke(app, [str(a) for a in base + args])
        assert r.exit_code == 1, (args, r.output, r.exception)
        assert "error:" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_split_mismatch_flag_and_recipe_key(shared_data, tmp_path):
    from conftest import MUSIQUE_DEV

    r = run("build", "-d", "musique", "-i", MUSIQUE_DEV, "--n", 5, "-o", tmp_path / "a", "--no-progress")
    assert r.exit_code == 1 and "--allow-split-mismatch" in r.output
    r = run("build", "-d", "musique", "-i", MUSIQUE_DEV, "--n", 5, "-o", tmp_path / "a", "--no-progress",
            "--allow-split-mismatch")
    assert r.exit_code == 0, r.output
    r = run("build", "recipe=musique-max", f"input={MUSIQUE_DEV}", "n=5", f"out={tmp_path / 'b'}",
            "allow_split_mismatch=true", "--no-progress")
    assert r.exit_code == 0, r.output
    assert read_manifest(tmp_path / "b")["config"]["allow_split_mismatch"] is True
