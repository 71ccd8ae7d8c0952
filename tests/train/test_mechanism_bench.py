"""bench/bench_mechanism.py end to end on the tiny model, as small as it goes: a warm start, a level profile of it
made by `curriculum profile`'s library function, two arms built with `--profile` (one of them calibrated), real
GRPO steps with TRL, held-out scoring. The summary's informative fraction is TRL's own log (1 -
frac_reward_zero_std, read back from the checkpoint's trainer_state.json), and its predicted fraction is the
build's card figure, itself recomputed here from the profile over the build's rows."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from rag_curriculum._plumbing import file_sha256

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2


def _bench():
    spec = importlib.util.spec_from_file_location("bench_mechanism", ROOT / "bench" / "bench_mechanism.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_mechanism_bench_reports_measured_and_predicted_informative_fractions(tmp_path):
    from rag_curriculum.difficulty.profile import read_profile
    from rag_curriculum.shards import read_rows

    bench = _bench()
    if not bench.TRAIN.is_file() or not bench.HELD_OUT.is_file():
        pytest.fail(f"{bench.TRAIN} or {bench.HELD_OUT} is missing: the shared data sits beside the checkout")
    out = tmp_path / "mechanism"
    s = bench.mechanism(out, arms=["max", "calibrated"], seeds=[0], steps=STEPS, prompts=2, generations=2, rows=4,
                        warm_rows=4, warm_epochs=2, profile_samples=2, eval_rows=2, eval_samples=1, max_tokens=32)
    assert json.loads((out / "summary.json").read_text()) == s
    assert (out / "mechanism.png").stat().st_size > 0
    assert s["settings"]["completions_per_run"] == STEPS * 2 * 2
    assert set(s["inputs"]) == {"start", "profile", "train", "held"} and set(s["inputs"]["train"]) == {"max",
                                                                                                    "calibrated"}
    prof = read_profile(out / "profile")
    for arm, folder in (("max", "train-max"), ("calibrated", "train-calibrated")):
        e = s["arms"][arm]
        # the predicted fraction is the build's card figure, and that is the profile's over the build's rows
        card = json.loads((out / folder / "manifest.json").read_text())["profile"]
        assert e["predicted"]["whole"] == card["this_build"]["whole"]
        rows = [(r["id"], int(r["level"])) for r in read_rows(out / folder)]
        assert e["predicted"]["whole"] == pytest.approx(prof.informative(rows, 2), abs=5e-5)
        assert e["predicted"]["profiled_questions"] == e["predicted"]["questions"] == 4  # the same questions
        assert len(e["predicted"]["per_step"]) == STEPS
        run = next(r for r in s["runs"] if r["arm"] == arm)
        # the measured fraction is TRL's logged frac_reward_zero_std, step by step
        state = json.loads((out / "runs" / f"{arm}-seed0" / f"checkpoint-{STEPS}" / "trainer_state.json")
                           .read_text())
        logged = [1 - h["frac_reward_zero_std"] for h in state["log_history"] if "frac_reward_zero_std" in h]
        assert run["informative"] == pytest.approx(logged, abs=1e-6) and len(logged) == STEPS
        assert run["held_out"]["reward"] == e["held_out_reward"]["mean"] == pytest.approx(
            s["start"]["held_out_reward"]["mean"] + e["vs_start"]["mean"], abs=1e-5)
        assert all(math.isfinite(x) for x in e["held_out_reward"]["ci"])
    # no min-max arm: differences are paired against the first arm trained
    assert s["settings"]["reference"] == "max" and "vs_reference" not in s["arms"]["max"]
    assert s["arms"]["calibrated"]["vs_reference"]["mean"] == pytest.approx(
        s["arms"]["calibrated"]["held_out_reward"]["mean"] - s["arms"]["max"]["held_out_reward"]["mean"], abs=1e-5)
    # the trainer's check of the profile, per quarter: static, refreshed and measured, read from the same runs
    for arm in ("max", "calibrated"):
        drift = s["arms"][arm]["drift"]
        assert sum(w["steps"][1] - w["steps"][0] + 1 for w in drift) == STEPS
        assert drift[0]["measured"] == pytest.approx(
            next(r for r in s["runs"] if r["arm"] == arm)["check"]["windows"][0]["measured"])
        assert "refreshed" in drift[0]
    # the per-step prediction on planted pass rates (level 1: 0.5, 2: 0.25, 3: 0.25): G = 2 gives 2p(1 - p), the
    # steps taking the curriculum's rows in order and from the start again when they outrun them
    import pyarrow as pa
    import pyarrow.parquet as pq

    planted = tmp_path / "planted"
    planted.mkdir()
    table = pq.read_table(out / "profile" / "profile.parquet")
    rates = [{1: 0.5, 2: 0.25, 3: 0.25}[lv] for lv in table.column("level").to_pylist()]
    table = table.set_column(table.schema.get_field_index("pass_rate"), "pass_rate", pa.array(rates, pa.float64()))
    # a pass/fail profile (no sample rewards: the prediction from the planted pass rates), sealed as the profile
    # command seals its table
    table = table.drop_columns([c for c in ("sample_reward", "sample_components", "reward", "informative")
                                if c in table.column_names])
    pq.write_table(table, planted / "profile.parquet")
    summary = json.loads((out / "profile" / "profile.json").read_text())
    summary["table_sha256"] = file_sha256(planted / "profile.parquet")
    (planted / "profile.json").write_text(json.dumps(summary))
    for arm, each in (("max", 0.375), ("calibrated", 0.5)):  # max: every row at level 3; calibrated: level 1
        got = bench.predicted_per_step(out / f"train-{arm}", planted, steps=3, prompts=2, group_size=2)
        assert got == pytest.approx([each] * 3)
    # calibrated puts the questions where the profile says their pass rate is nearest 0.5
    placed = {r["id"]: int(r["level"]) for r in read_rows(out / "train-calibrated")}
    for rid, level in placed.items():
        assert level == prof.calibrated_level(rid, 3)[0]
