"""`curriculum build --schedule calibrated --band LO,HI` on real MuSiQue rows, with a level profile made by `curriculum
profile` from a scripted model whose correct samples per question and level are planted: each planted question goes
to a level whose pass rate lies inside the band, the one nearest its middle; a question with no level inside goes to
the level nearest the band and is counted, by reason, in the manifest; the band is recorded in the manifest, the
card and the schedule figures' label; `--target` with `--band` and a bad band are refused in one line, nothing
written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.level_oracle import CALIBRATED, LEVELS, PLANTED, SAMPLES, LevelOracle

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.difficulty.profile import LevelProfile
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import ProfileConfig, profile
from rag_curriculum.shards import read_rows

G = 4
#: Planted pass rates (PLANTED / SAMPLES) at levels 1, 2, 4, 8, and where band 0.6-0.8 (middle 0.7) puts them:
#: q0 1, .75, .5, 0 -> 2 (.75 inside); q1 always right -> 8 (none inside, all above: the hardest); q2 .5, .5, .25,
#: .25 -> 1 (none inside, .5 nearest, tied: the lowest); q3 .75, .5, 0, 0 -> 1 (.75 inside); q4 never right -> 1
#: (below); q5 1, .5, .5, .25 -> 2 (none inside; .5 at 0.1 below is nearer than 1.0 at 0.2 above; tied: the lowest)
BAND = (0.6, 0.8)
IN_BAND = [2, 8, 1, 1, 1, 2]
OUTSIDE = {"above": 1, "below": 3}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, shared_data) -> tuple[Path, list[str]]:
    """A profile of 6 MuSiQue questions at levels 1, 2, 4, 8 (K = 8), and their row ids."""
    base = tmp_path_factory.mktemp("profiled-band")
    adaptive = base / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(adaptive), seed=0))
    out = base / "profile"
    profile(ProfileConfig(shards=str(adaptive), out=str(out), backend="scripted", samples=SAMPLES, group_size=G,
                          levels=",".join(map(str, LEVELS))), backend=ScriptedBackend(script=LevelOracle(adaptive)))
    return out, [r["id"] for r in read_rows(adaptive)]


def planted_profile() -> LevelProfile:
    rates = {(f"q{q}", lv): c[i] / SAMPLES for q, c in enumerate(PLANTED) for i, lv in enumerate(LEVELS)}
    return LevelProfile(Path("p"), {}, rates, LEVELS, ["musique"], None)


def test_planted_questions_go_inside_the_band_nearest_its_middle_or_to_the_nearest_level():
    prof = planted_profile()
    placed = [prof.band_level(f"q{q}", 8, BAND) for q in range(len(PLANTED))]
    assert [lv for lv, _, _ in placed] == IN_BAND
    reasons = [r for _, _, r in placed]
    assert reasons == ["inside", "above", "below", "inside", "below", "below"]
    # a band of one point places as the target rule does (ties included)
    assert [prof.band_level(f"q{q}", 8, (0.5, 0.5))[0] for q in range(len(PLANTED))] == CALIBRATED
    # inside the band, the nearest the middle wins over the nearest the target: q0 has .75 and .5 inside [0.4, 1]
    assert prof.band_level("q0", 8, (0.4, 1.0))[:2] == (2, 0.75) and prof.calibrated_level("q0", 8)[0] == 4
    assert prof.band_level("q1", 2, BAND) == (2, 1.0, "above"), "never above the source's K"


def test_band_ties_go_to_the_lowest_level_unless_every_tied_rate_is_above_the_middle():
    def placed(rates: list[float], band: tuple[float, float]) -> tuple[int, float, str]:
        prof = LevelProfile(Path("p"), {}, {("q", lv): r for lv, r in zip((1, 2, 4), rates, strict=True)},
                            [1, 2, 4], ["musique"], None)
        return prof.band_level("q", 4, band)

    assert placed([0.6, 0.4, 0.0], (0.3, 0.7)) == (1, 0.6, "inside"), "0.6 and 0.4 tie about 0.5: the lowest"
    assert placed([0.6, 0.6, 0.0], (0.3, 0.7)) == (2, 0.6, "inside"), "tied above the middle: the hardest"
    assert placed([0.9, 0.1, 0.0], (0.3, 0.7)) == (1, 0.9, "above"), "none inside, 0.9 and 0.1 tie: the lowest"
    assert placed([0.2, 0.1, 0.0], (0.3, 0.7)) == (1, 0.2, "below")


@pytest.mark.slow
def test_a_banded_build_places_planted_questions_inside_the_band_and_counts_the_rest(profiled, tmp_path):
    prof, ids = profiled
    out = tmp_path / "banded"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "calibrated", "--K", "8", "--profile",
            prof, "--band", "0.6,0.8", "--group-size", str(G), "-o", out)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "calibrated (band 0.6-0.8)" in text and "4 questions with no level inside it" in text
    rows = pq.read_table(out / "data").to_pylist()
    level = {row["id"]: row["level"] for row in rows}
    assert [level[i] for i in ids] == IN_BAND
    # a question the profile did not see takes its level's mean: level 1's 17/24 = 0.708 is the only one inside
    assert {lv for i, lv in level.items() if i not in ids} == {1}
    manifest = json.loads((out / "manifest.json").read_text())
    cal = manifest["profile"]["calibrated"]
    assert cal["band"] == [0.6, 0.8] and "target" not in cal and cal["outside_band"] == OUTSIDE
    assert cal["own_rate"] == 6 and cal["own_rate"] + cal["level_rate"] == len(rows)
    assert manifest["config"]["band"] == [0.6, 0.8] and "target" not in manifest["config"]
    sched = manifest["profile"]["schedules"]
    assert "calibrated (band 0.6-0.8)" in sched and not any(k.startswith("calibrated (target") for k in sched)
    assert manifest["profile"]["this_build"] == sched["calibrated (band 0.6-0.8)"]
    # an adaptive run's start aims at the band's middle, as the questions do: level 1 (0.708), not level 2 (0.54)
    start = manifest["profile"]["adaptive_start"]
    assert (start["level"], start["target"], start["band"]) == (1, 0.7, [0.6, 0.8]), start
    assert "an adaptive controller aiming at 0.7 starts at level 1" in text
    card = (out / "README.md").read_text()
    assert "`--schedule calibrated --band 0.6,0.8`" in card and "| calibrated (band 0.6-0.8) |" in card
    assert "4 with no level inside the band at the level nearest it (1 above it, 3 below)" in card


def test_a_recipes_band_is_a_pair_or_lo_hi():
    assert BuildConfig.from_dict({"dataset": "musique", "schedule": "calibrated", "profile": "p",
                                  "band": [0.3, 0.7]}).band == [0.3, 0.7]
    cfg = BuildConfig.from_dict({"dataset": "musique", "schedule": "calibrated", "profile": "p", "band": "0.3,0.7"})
    assert cfg.band == [0.3, 0.7] and cfg.to_dict()["band"] == [0.3, 0.7]
    assert "band" not in BuildConfig.from_dict({"dataset": "musique"}).to_dict()


@pytest.mark.parametrize(("flags", "expected", "code"), [  # exit 2: a setting's impossible value (a usage error)
    (["--target", "0.5", "--band", "0.3,0.7"],
     "--target 0.5 and --band 0.3,0.7 both choose the calibrated level; keep one", 1),
    (["--band", "-0.1,0.7"], "--band -0.1,0.7: LO -0.1 is outside 0..1", 2),
    (["--band", "0.3,1.2"], "--band 0.3,1.2: HI 1.2 is outside 0..1", 2),
    (["--band", "0.7,0.3"], "--band 0.7,0.3: LO 0.7 is above HI 0.3", 2),
    (["--band", "0.3"], "--band 0.3: not two numbers LO,HI", 2),
    (["--band", "low,high"], "--band low,high: not two numbers LO,HI", 2),
], ids=["target and band", "LO below 0", "HI above 1", "LO above HI", "one number", "not numbers"])
def test_a_bad_band_is_refused_in_one_line_and_nothing_is_written(profiled, tmp_path, flags, expected, code):
    prof, _ = profiled
    out = tmp_path / "out"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "calibrated", "--K", "8", "--profile", prof,
            *flags, "-o", out)
    assert expected in one_error(r, code)
    assert not out.exists()


def test_a_band_without_the_calibrated_schedule_is_refused(tmp_path):
    out = tmp_path / "out"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--schedule", "max", "--band", "0.3,0.7", "-o", out)
    assert "--band is for --schedule calibrated, not 'max'" in one_error(r)
    assert not out.exists()
