"""`curriculum build --profile` on real MuSiQue rows, with a level profile made by `curriculum profile` from a scripted
model whose correct samples per question and level are planted: each schedule's expected informative fraction
equals its closed form on the planted pass rates; a calibrated build places the planted questions at their planted
levels (the others at the level nearest the target), easiest first, and says so in the manifest, the card and the
printed table; the refusals (no profile, a profile of another dataset or model, a level with no scored question,
a folder that is not a profile), each one line with nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.level_oracle import CALIBRATED, LEVELS, PLANTED, SAMPLES, LevelOracle

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import ProfileConfig, profile
from rag_curriculum.shards import read_rows

G = 4


def f(p: float, g: int = G) -> float:
    return 1 - p ** g - (1 - p) ** g


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, shared_data) -> tuple[Path, list[str]]:
    """A profile of 6 MuSiQue questions at levels 1, 2, 4, 8 (K = 8), and their row ids."""
    base = tmp_path_factory.mktemp("profiled")
    adaptive = base / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(adaptive), seed=0))
    out = base / "profile"
    profile(ProfileConfig(shards=str(adaptive), out=str(out), backend="scripted", samples=SAMPLES, group_size=G,
                          levels=",".join(map(str, LEVELS))), backend=ScriptedBackend(script=LevelOracle(adaptive)))
    return out, [r["id"] for r in read_rows(adaptive)]


def level_mean(i: int) -> float:
    return sum(c[i] for c in PLANTED) / (len(PLANTED) * SAMPLES)


def level_info(i: int) -> float:
    return sum(f(c[i] / SAMPLES) for c in PLANTED) / len(PLANTED)


@pytest.mark.slow
def test_a_calibrated_build_places_planted_questions_at_their_planted_levels(profiled, tmp_path):
    prof, ids = profiled
    out = tmp_path / "calibrated"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule="calibrated",
                                 K=8, profile=str(prof), out=str(out)))
    rows = pq.read_table(out / "data").to_pylist()
    level = {r["id"]: r["level"] for r in rows}
    assert [level[i] for i in ids] == CALIBRATED
    # a question the profile did not see goes to the level whose mean pass rate is nearest 0.5: level 2 (0.542)
    means = {lv: level_mean(i) for i, lv in enumerate(LEVELS)}
    nearest = min(LEVELS, key=lambda lv: abs(means[lv] - 0.5))
    assert nearest == 2 and {lv for i, lv in level.items() if i not in ids} == {nearest}
    # easiest first: the always-right question (1.0 at level 8), the unprofiled rows (0.542), the planted 0.5s in
    # sample order, the never-right one last
    order = [r["id"] for r in rows]
    assert order[0] == ids[1] and order[-1] == ids[4]
    assert [i for i in order if i in ids][1:-1] == [i for i in order if i in ids[:4] + ids[5:] and i != ids[1]]
    manifest = json.loads((out / "manifest.json").read_text())
    cal = manifest["profile"]["calibrated"]
    assert cal["own_rate"] == 6 and cal["own_rate"] + cal["level_rate"] == len(rows) and cal["target"] == 0.5
    assert manifest["row_order"] == "calibrated" and manifest["config"]["schedule"] == "calibrated"
    card = (out / "README.md").read_text()
    assert "## Informative groups before training" in card and "--schedule calibrated --target 0.5" in card


def test_each_schedules_informative_fraction_is_the_closed_form_on_the_planted_pass_rates(profiled, tmp_path):
    prof, ids = profiled
    out = tmp_path / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule="max", K=8,
                                 profile=str(prof), out=str(out)))
    rows = pq.read_table(out / "data").to_pylist()
    n = len(rows)
    record = json.loads((out / "manifest.json").read_text())["profile"]
    assert record["group_size"] == G and record["profiled_questions"] == 6 and record["questions"] == n

    def expected(levels: dict[str, int]) -> float:  # row id -> level; only levels that were profiled here
        total = 0.0
        for rid, lv in levels.items():
            i = LEVELS.index(lv)
            total += f(PLANTED[ids.index(rid)][i] / SAMPLES) if rid in ids else level_info(i)
        return total / len(levels)

    sched = record["schedules"]
    assert sched["max"]["whole"] == pytest.approx(expected({r["id"]: 8 for r in rows}), abs=1e-4)
    assert sched["adaptive start"]["whole"] == pytest.approx(expected({r["id"]: 1 for r in rows}), abs=1e-4)
    half = n // 2  # min-max: the first half (in sample order) at 1, the rest at K
    by_position = {r["id"]: (1 if i < half else 8) for i, r in enumerate(rows)}  # a max build keeps sample order
    assert sched["min-max"]["whole"] == pytest.approx(expected(by_position), abs=1e-4)
    assert sched["min-max shuffled"]["whole"] == pytest.approx(sched["min-max"]["whole"], abs=1e-4)
    q = n // 4
    first = {r["id"]: 1 for r in rows[:q]}
    assert sched["min-max"]["first_quarter"] == pytest.approx(expected(first), abs=1e-4)
    assert record["this_build"] == sched["max"]
    cal = sched["calibrated (target 0.5)"]["whole"]
    assert cal > sched["max"]["whole"] and cal > sched["min-max"]["whole"], "nearest 0.5 is most informative"
    # a level between profiled ones takes the interpolated pass rate: linear's level 3 lies between 2 and 4
    assert record["level_pass_rate"] == {str(lv): round(level_mean(i), 4) for i, lv in enumerate(LEVELS)}


def test_the_build_prints_each_schedules_informative_fraction(profiled, tmp_path, caplog, monkeypatch):
    prof, _ = profiled
    monkeypatch.chdir(tmp_path)
    given = os.path.relpath(prof)
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "min-max", "--K", "8", "--profile", given,
            "--group-size", "2", "-o", "outputs/out")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "expected informative groups (G = 2)" in text and "min-max shuffled" in text and "this build" in text
    assert "adaptive.kwargs.start=2" in text
    assert caplog.text.count("group_size 4 in the profile, 2 here") == 1, "a profile used with another G: said once"
    assert f"from {given} (" in text, r.output  # the profile as given, from where the command ran (not from the output)


def test_a_target_on_the_informative_fraction_places_each_question_where_its_groups_teach_most(profiled, tmp_path):
    prof, ids = profiled
    out = tmp_path / "informative"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "calibrated", "--K", "8", "--profile", prof,
            "--target-informative", "1", "-o", out)
    assert r.exit_code == 0, r.output
    level = {row["id"]: row["level"] for row in pq.read_table(out / "data").to_pylist()}
    # a pass/fail reward: the most informative level is the one nearest p = 0.5, ties by the pass rate rule
    assert [level[i] for i in ids] == CALIBRATED
    record = json.loads((out / "manifest.json").read_text())["profile"]
    assert record["calibrated"]["target_informative"] == 1.0
    assert record["adaptive_start"]["target_informative"] == 1.0
    best = max(record["level_informative"].values())
    assert record["level_informative"][str(record["adaptive_start"]["level"])] == best
    assert "--target-informative 1" in (out / "README.md").read_text()
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "max", "--K", "8", "--profile", prof,
            "--target-informative", "1", "-o", tmp_path / "refused")
    assert "--target-informative is for --schedule calibrated" in one_error(r)
    assert not (tmp_path / "refused").exists()


def _reseal(folder: Path) -> None:
    from rag_curriculum._plumbing import file_sha256

    summary = json.loads((folder / "profile.json").read_text())
    summary["table_sha256"] = file_sha256(folder / "profile.parquet")
    (folder / "profile.json").write_text(json.dumps(summary))


@pytest.mark.parametrize("case", ["edited", "swapped"])
def test_a_profile_whose_table_changed_after_it_was_written_is_refused(profiled, tmp_path, case):
    """An edited ``profile.parquet`` (its digest is not the one ``profile.json`` records), or one of another
    profile put in its place with the digest remade (no row of a level the summary lists): refused in one line,
    naming the table, not blamed on a short context."""
    prof, _ = profiled
    bad = tmp_path / "bad-profile"
    shutil.copytree(prof, bad)
    table = pq.read_table(bad / "profile.parquet")
    if case == "edited":
        rates = [None if r is None else 1.0 - r for r in table.column("pass_rate").to_pylist()]
        import pyarrow as pa

        table = table.set_column(table.schema.get_field_index("pass_rate"), "pass_rate", pa.array(rates, pa.float64()))
        expected = "profile.parquet: its SHA-256 is not the one profile.json records"
    else:
        import pyarrow.compute as pc

        table = table.filter(pc.not_equal(table["level"], 8))  # (as another profile's levels 1, 2, 4)
        expected = "profile.parquet: no row of level 8, which profile.json lists: the table is not this profile's"
    pq.write_table(table, bad / "profile.parquet")
    if case == "swapped":
        _reseal(bad)
    out = tmp_path / "out"
    line = one_error(run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "calibrated", "--K", "8",
                         "--profile", bad, "-o", out))
    assert expected in line and "--max-model-len" not in line, line
    assert not out.exists()


def test_a_profile_of_one_dataset_does_not_score_a_mixtures_other(profiled, tmp_path):
    from rag_curriculum.errors import ProfileError

    prof, _ = profiled
    cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6), SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 6)],
                      schedule="min-max", K=8, profile=str(prof), out=str(tmp_path / "out"))
    with pytest.raises(ProfileError, match="measured musique, not this build's hotpotqa"):
        build_curriculum(cfg)
    assert not (tmp_path / "out").exists()


def test_the_adaptive_start_advised_is_a_level_of_the_build(profiled, tmp_path):
    prof, _ = profiled
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "min-max", "--K", "1", "--profile", prof,
            "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "adaptive.kwargs.start=1" in text, text
    start = json.loads((tmp_path / "out" / "manifest.json").read_text())["profile"]["adaptive_start"]
    assert start["level"] == 1, start


@pytest.mark.parametrize("case", ["no profile", "another dataset", "another model", "empty level", "not a profile"])
def test_a_bad_profile_is_refused_in_one_line_and_nothing_is_written(profiled, tmp_path, case):
    prof, _ = profiled
    args = ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "calibrated", "--K", "8"]
    if case == "no profile":
        expected = "--schedule calibrated places each question by its measured pass rate: it needs --profile"
    elif case == "another dataset":
        args = ["build", "-d", "hotpotqa", "-i", HOTPOT_TRAIN, "--schedule", "calibrated", "--K", "8", "--profile",
                prof]
        expected = "measured musique, not this build's hotpotqa"
    elif case == "another model":
        args += ["--profile", prof, "--tokenizer", "Qwen/Qwen2.5-7B-Instruct"]
        expected = "measured model inline, not --tokenizer Qwen/Qwen2.5-7B-Instruct's model"
    elif case == "empty level":
        bad = tmp_path / "bad-profile"
        shutil.copytree(prof, bad)
        table = pq.read_table(bad / "profile.parquet")
        skipped = ["prompt_too_long" if lv == 8 else s for lv, s in zip(table.column("level").to_pylist(),
                                                                        table.column("skipped").to_pylist(),
                                                                        strict=True)]
        import pyarrow as pa

        table = table.set_column(table.schema.get_field_index("skipped"), "skipped", pa.array(skipped, pa.string()))
        pq.write_table(table, bad / "profile.parquet")
        _reseal(bad)  # (as a profile whose level 8 was all skipped is written)
        args += ["--profile", bad]
        expected = "level 8 has no scored question"
    else:
        args += ["--profile", tmp_path]
        expected = "no profile.json: not a finished level profile"
    out = tmp_path / "out"
    r = run(*args, "-o", out)
    assert expected in one_error(r)
    assert not out.exists()


@pytest.mark.slow
def test_a_calibrated_build_of_the_partitions_answerable_questions(profiled, tmp_path):
    """The partition's split composes with the calibrated schedule: `--questions-from PARTITION/answerable` keeps
    the questions the base model answered at K, and each goes to its calibrated level."""
    from rag_curriculum.partition import PartitionConfig, partition

    prof, ids = profiled
    adaptive = tmp_path / "adaptive"  # stored at K = 8: a max curriculum too, the partition's input
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(adaptive), seed=0))
    part = tmp_path / "partition"
    partition(PartitionConfig(shards=str(adaptive), out=str(part), backend="scripted", samples=SAMPLES),
              backend=ScriptedBackend(script=LevelOracle(adaptive)))
    answerable = [i for i, c in zip(ids, PLANTED, strict=True) if c[LEVELS.index(8)] > 0]
    assert sorted(r["id"] for r in read_rows(part / "answerable")) == sorted(answerable)
    out = tmp_path / "calibrated"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule="calibrated",
                                 K=8, profile=str(prof), questions_from=str(part / "answerable"), out=str(out)))
    rows = read_rows(out)
    assert sorted(r["id"] for r in rows) == sorted(answerable)
    assert {r["id"]: r["level"] for r in rows} == {i: CALIBRATED[ids.index(i)] for i in answerable}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sources"][0]["excluded"] == {"not in --questions-from": 100 - len(answerable)}
    assert manifest["config"]["questions_from"] == "../partition/answerable"


def test_ties_go_to_the_lowest_level_unless_every_tied_rate_is_above_the_target():
    from rag_curriculum.difficulty.profile import LevelProfile

    def placed(rates: list[float], K: int = 4) -> tuple[int, float]:
        prof = LevelProfile(Path("p"), {}, {("q", lv): r for lv, r in zip((1, 2, 4), rates, strict=True)},
                            [1, 2, 4], ["musique"], None)
        return prof.calibrated_level("q", K, 0.5)

    assert placed([0.75, 0.25, 0.0]) == (1, 0.75), "0.75 and 0.25 tie: the lowest"
    assert placed([1.0, 1.0, 1.0]) == (4, 1.0), "always right: the hardest"
    assert placed([0.0, 0.0, 0.0]) == (1, 0.0), "never right: the easiest"
    assert placed([1.0, 1.0, 0.9]) == (4, 0.9)
    assert placed([1.0, 1.0, 1.0], K=2) == (2, 1.0), "never above the source's K"
