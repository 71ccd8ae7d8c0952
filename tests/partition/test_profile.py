"""`curriculum profile` on real MuSiQue rows: a scripted model whose correct samples per question and level are
planted, so every count, pass rate, interval and informative fraction is known; the counts recomputed from the
recorded predictions with the official F1; resuming after a stop; the refusals (a level above K, an empty level,
rows that cannot be shown at other levels, another model in the same --out), each one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.level_oracle import LEVELS, PLANTED, SAMPLES, LevelOracle

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.difficulty.profile import informative_probability, read_profile
from rag_curriculum.errors import RunMismatchError, UsageError
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import ProfileConfig, profile
from rag_curriculum.rewards import answer_f1
from rag_curriculum.shards import read_rows


@pytest.fixture(scope="module")
def adaptive_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("adaptive") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(out), seed=0), command="curriculum build (test)")
    return out


def make(adaptive_dir, out, **kw) -> ProfileConfig:
    return ProfileConfig(shards=str(adaptive_dir), out=str(out), backend="scripted", samples=SAMPLES,
                         levels=",".join(map(str, LEVELS)), chunk_size=5, **kw)


def test_the_profile_counts_every_planted_sample_and_the_official_f1_recounts_them(adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    res = profile(make(adaptive_dir, out, group_size=4), backend=ScriptedBackend(script=LevelOracle(adaptive_dir)))
    assert res.complete
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    rows = read_rows(adaptive_dir)
    assert [(r["question"], r["level"]) for r in lines] == [(q, lv) for q in range(len(PLANTED)) for lv in LEVELS]
    for r in lines:
        planted = PLANTED[r["question"]][LEVELS.index(r["level"])]
        answers = rows[r["question"]]["answers"]
        assert r["id"] == rows[r["question"]]["id"] and len(r["completions"]) == SAMPLES
        assert r["c"] == planted == sum(answer_f1(p, answers) >= 1.0 for p in r["predictions"])
        assert r["pass_rate"] == planted / SAMPLES
        pool = rows[r["question"]]["pool_size"]
        assert r["num_distractors"] == min(max(r["level"] + 2 - r["hops"], 0), pool)
    summary = json.loads((out / "profile.json").read_text())
    assert summary["kind"] == "level-profile" and summary["levels"] == LEVELS and summary["paired_questions"] == 6
    for i, lv in enumerate(LEVELS):
        fig = summary["per_level"][str(lv)]
        rates = [c[i] / SAMPLES for c in PLANTED]
        assert fig["pass_rate"] == pytest.approx(sum(rates) / len(rates), abs=1e-6)
        assert fig["informative"] == pytest.approx(
            sum(1 - p ** 4 - (1 - p) ** 4 for p in rates) / len(rates), abs=1e-6)
        assert fig["pass_rate_ci"][0] <= fig["pass_rate"] <= fig["pass_rate_ci"][1]
        assert fig["change"] == pytest.approx(fig["pass_rate"] - summary["per_level"]["1"]["pass_rate"], abs=2e-6)
    assert summary["per_level"]["8"]["change_ci"][1] < 0, "the planted drop from level 1 to 8 is outside the noise"
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    prof = read_profile(out)
    assert prof.pass_rate(rows[0]["id"], 4) == (0.5, True)
    assert prof.pass_rate("musique-unseen", 4)[0] == pytest.approx(sum(c[2] for c in PLANTED) / 24)
    assert prof.pass_rate(rows[0]["id"], 6) == (pytest.approx((0.5 + 0.0) / 2), True), "between levels 4 and 8"


def test_the_expected_informative_fraction_is_its_closed_form_on_planted_pass_rates():
    for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        for g in (1, 2, 7, 16):
            assert informative_probability(p, g) == pytest.approx(1 - p ** g - (1 - p) ** g if g > 1 else 0.0)
    assert informative_probability(0.5, 7) == pytest.approx(1 - 2 / 128)


def test_a_stopped_profile_continues_to_the_same_files(adaptive_dir, tmp_path):
    oracle = LevelOracle(adaptive_dir)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    profile(make(adaptive_dir, whole), backend=ScriptedBackend(script=oracle))
    first = profile(make(adaptive_dir, parts), backend=ScriptedBackend(script=oracle), max_chunks=2)
    assert not first.complete and not (parts / "profile.json").exists()
    again = profile(make(adaptive_dir, parts), backend=ScriptedBackend(script=oracle))
    assert again.complete and again.run.generated_chunks == 3
    assert (parts / "profile.parquet").read_bytes() == (whole / "profile.parquet").read_bytes()
    a, b = (json.loads((d / "profile.json").read_text()) for d in (whole, parts))
    assert {k: v for k, v in a.items() if k != "config"} == {k: v for k, v in b.items() if k != "config"}


def test_another_model_in_the_same_out_is_refused_naming_it(adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    profile(make(adaptive_dir, out), backend=ScriptedBackend(script=LevelOracle(adaptive_dir)))
    before = sorted(p.name for p in (out / "work").iterdir())
    other = make(adaptive_dir, out, model="other-model")
    with pytest.raises(RunMismatchError, match="other-model"):
        profile(other)
    assert sorted(p.name for p in (out / "work").iterdir()) == before


@pytest.mark.parametrize(("levels", "message"), [
    ("1,2,9", "level 9 is outside 1..K (K = 8)"),
    ("1,,4", "an empty level"),
    ("1,two", "'two' is not a level"),
])
def test_bad_levels_are_refused_before_anything_is_written(adaptive_dir, tmp_path, levels, message):
    out = tmp_path / "profile"
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        profile(ProfileConfig(shards=str(adaptive_dir), out=str(out), backend="scripted", levels=levels))
    assert not out.exists()


def test_the_command_refuses_a_level_above_K_and_rows_of_one_level_in_one_line(adaptive_dir, tmp_path, min_max_shards):
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "scripted", "--levels", "1,30", "--out", out)
    assert "level 30 is outside 1..K (K = 8)" in one_error(r, 2)
    r = run("profile", min_max_shards, "--backend", "scripted", "--out", out)
    assert "not an adaptive one" in one_error(r)
    assert not out.exists()


@pytest.mark.slow
def test_the_command_profiles_a_real_model_and_a_build_reads_the_profile(tiny_model_dir, tmp_path):
    """Through the real command line with real generation (a tiny random model on the CPU, transformers): the
    profile's counts recomputed from its predictions with the official F1, the summary's figures from its lines,
    then `curriculum build --profile` and `--schedule calibrated` on it."""
    from rag_curriculum.difficulty.profile import informative_probability as f

    out = tmp_path / "profile"
    r = run("profile", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--n", 3, "--K", 4, "--backend",
            "transformers", "--model", tiny_model_dir, "--device", "cpu", "--samples", 3, "--max-tokens", 12,
            "--temperature", 1.0, "--group-size", 3, "--out", out)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "pass rate per level over 3 questions x 3 samples" in text
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    rows = {row["id"]: row for row in read_rows(out / "input")}
    assert [(x["question"], x["level"]) for x in lines] == [(q, lv) for q in range(3) for lv in (1, 2, 4)]
    assert len({c for x in lines for c in x["completions"]}) > 3, "real, varied samples"
    for x in lines:
        answers = rows[x["id"]]["answers"]
        assert x["c"] == sum(answer_f1(p, answers) >= 1.0 for p in x["predictions"]) and x["n"] == 3
    summary = json.loads((out / "profile.json").read_text())
    for lv in (1, 2, 4):
        rates = [x["pass_rate"] for x in lines if x["level"] == lv]
        fig = summary["per_level"][str(lv)]
        assert fig["pass_rate"] == pytest.approx(sum(rates) / 3, abs=1e-6)
        assert fig["informative"] == pytest.approx(sum(f(p, 3) for p in rates) / 3, abs=1e-6)
    assert summary["generation"]["fingerprint"]["generation"]["backend"] == "transformers"
    built = tmp_path / "calibrated"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 3, "--K", 4, "--schedule", "calibrated",
            "--profile", out, "-o", built)
    assert r.exit_code == 0, r.output
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["profile"]["calibrated"]["own_rate"] == 3 and manifest["profile"]["group_size"] == 3
