"""What a user shares names no folder of their machine. In a working folder of its own, with the home folder moved
into the same temporary folder and every path given absolute, a level profile, a build with it, a partition, a
warm start, two GRPO steps and an evaluation write their cards, manifests and records (``warm_start.json``,
``train_plan.json``, a checkpoint's ``curriculum_plan.json``, ``informative.json``, the evaluation's
``summary.json``) with paths relative to the working folder or the output, or under ``~``: neither the temporary
folder's absolute path, nor the real home folder, nor the shared data's folder appears in any of them. Left out of
the scan: ``work/`` (a run's private state, which resumes it) and ``train_config.yaml`` (the run's config as it was
given, to run it again)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, SHARED_DATA
from support.cli_runs import run

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for the warm start and the training")

#: Text records a user shares (pushed with a model or a dataset, quoted in a paper's artefacts).
SCANNED = (".json", ".jsonl", ".md")
PRIVATE = ("work", "train_config.yaml")


def shared_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SCANNED
                  and not any(part in PRIVATE for part in p.relative_to(root).parts))


def test_cards_manifests_and_records_name_no_machine_path(tmp_path, tiny_model_dir, monkeypatch):
    real_home = Path.home()
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    model = home / "models" / "tiny"
    shutil.copytree(tiny_model_dir, model)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    out = work / "outputs"

    def ok(*args):
        r = run(*args)
        assert r.exit_code == 0, (args[0], r.output)
        return r

    hotpot = ["--dataset", "hotpotqa", "--input", HOTPOT_TRAIN]
    ok("profile", *hotpot, "--n", 2, "--K", 3, "--levels", "1,K", "--backend", "transformers", "--model", model,
       "--samples", 2, "--max-tokens", 2, "--recipe", "cpu-tiny", "--group-size", 2, "--out", out / "profile")
    ok("build", *hotpot, "--schedule", "min-max", "--K", 3, "--n", 4, "--profile", out / "profile",
       "--out", out / "hotpotqa-cpu")
    ok("build", "--setting", "ideal", "--dataset", "hotpotqa", "--input", HOTPOT_HUB, "--n", 1, "--out",
       work / "eval" / "ideal")
    ok("partition", out / "hotpotqa-cpu", "--backend", "transformers", "--model", model, "--pass-at", 1, "--n", 2,
       "--max-tokens", 2, "--out", out / "partition")
    ok("warm-start", out / "hotpotqa-cpu", "--model", model, "--rows", 2, "--copies", 1, "--epochs", 1,
       "--out", out / "warm")
    ok("train", "recipe=cpu-tiny", f"model.name_or_path={out / 'warm'}", f"data.shards={out / 'hotpotqa-cpu'}",
       f"run.output_dir={out / 'train' / 'run'}", "grpo.max_steps=2", "grpo.save_steps=2",
       "grpo.max_completion_length=4", "grpo.report_to=none")
    ok("eval", "--backend", "transformers", "--model", f"warm={out / 'warm'}", "--model",
       f"trained={out / 'train' / 'run' / 'checkpoint-2'}", "--data", work / "eval" / "ideal", "--samples", 1,
       "--max-tokens", 2, "--limit", 1, "--out", out / "eval", "--no-plots")

    files = shared_files(work)
    names = {p.relative_to(work).as_posix() for p in files}
    for promised in ("outputs/warm/warm_start.json", "outputs/train/run/train_plan.json",
                     "outputs/train/run/README.md", "outputs/train/run/checkpoint-2/curriculum_plan.json",
                     "outputs/train/run/informative.json", "outputs/hotpotqa-cpu/manifest.json",
                     "outputs/hotpotqa-cpu/README.md", "outputs/partition/partition.json",
                     "outputs/partition/answerable/manifest.json", "outputs/profile/profile.json",
                     "outputs/eval/summary.json", "outputs/eval/eval_config.json"):
        assert promised in names, sorted(names)
    needles = {"the temporary folder": str(tmp_path), "the home folder": str(real_home),
               "the shared data's folder": str(SHARED_DATA)}
    for p in files:
        text = p.read_text(encoding="utf-8")
        for what, needle in needles.items():
            if needle != "/":
                assert needle not in text, f"{p.relative_to(work)} names {what} ({needle})"

    # what the records say instead: from the working folder, or under ~
    warm = json.loads((out / "warm" / "warm_start.json").read_text())["settings"]
    assert (warm["model"], warm["shards"], warm["out"]) == ("~/models/tiny", "outputs/hotpotqa-cpu", "outputs/warm")
    plan = json.loads((out / "train" / "run" / "train_plan.json").read_text())
    assert (plan["model"], plan["shards"], plan["informative_profile"]) == (
        "outputs/warm", "outputs/hotpotqa-cpu", "outputs/profile")
    card = (out / "train" / "run" / "README.md").read_text()
    assert "| base model | `outputs/warm` (a local folder) |" in card
    assert "| data | `outputs/hotpotqa-cpu`: 4 rows of hotpotqa (K = 3)" in card
    assert 'model="outputs/train/run/checkpoint-2"' in card
    assert json.loads((out / "train" / "run" / "informative.json").read_text())["profile"] == "outputs/profile"
    summary = json.loads((out / "eval" / "summary.json").read_text())
    assert [m["path"] for m in summary["models"]] == ["outputs/warm", "outputs/train/run/checkpoint-2"]
    assert json.loads((out / "hotpotqa-cpu" / "manifest.json").read_text())["profile"]["path"] == "../profile"
