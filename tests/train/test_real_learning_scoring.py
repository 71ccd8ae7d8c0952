"""bench/bench_real_learning.py's held-out scoring, on real held-out rows with canned completions: the per-question
answer and citation F1 are the official metrics, joint F1 is the harmonic mean of the *aggregated* answer and
citation F1 (RAG-RL's tables), and every figure comes with a bootstrap interval around it. Also the schedule
comparison's plot is drawn from such results."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared" / "data" / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_real_learning", ROOT / "bench" / "bench_real_learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


class _Canned:
    """A generation backend answering each prompt with the completions given for it, in order."""

    def __init__(self, answers):
        self.answers = answers

    def generate(self, prompts, sampling, seeds=None):
        assert len(prompts) == len(self.answers) and sampling.n == len(self.answers[0])
        return self.answers

    def close(self):
        pass


def _completion(answer: str, cited: list[str]) -> str:
    return (f"<reasoning>\nfrom the passages\n</reasoning>\n<answer>\nFinal answer: {answer}\n"
            f"Supporting passages: {', '.join(cited)}\n</answer>")


def test_held_out_scoring_gives_joint_f1_of_the_aggregates_with_intervals(tmp_path, monkeypatch):
    if not SAMPLE.is_file():
        pytest.fail(f"{SAMPLE} is missing: the shared data sits beside the checkout as ../shared")
    bench = _bench()
    from rag_curriculum import generation
    from rag_curriculum.shards import read_rows

    rows = read_rows(bench.build(tmp_path / "held", SAMPLE, 6, held_out=True))
    assert len(rows) == 6
    # question 0: right answer, gold cited (twice); question 1: right answer, a distractor cited; the rest: wrong
    answers = []
    for i, row in enumerate(rows):
        distractor = next(p["label"] for p in row["passages"] if p["label"] not in row["gold_labels"])
        if i == 0:
            answers.append([_completion(row["answers"][0], row["gold_labels"])] * 2)
        elif i == 1:
            answers.append([_completion(row["answers"][0], [distractor])] * 2)
        else:
            answers.append([_completion("no idea at all", [distractor]), "not the format"])
    monkeypatch.setattr(generation, "get_backend", lambda name, **kw: _Canned(answers))
    got = bench.evaluate("unused", rows, samples=2, seed=0, max_tokens=8)

    assert got["answer_f1"] == pytest.approx(2 / 6)  # two questions answered exactly, four with F1 0
    assert got["citation_f1"] == pytest.approx(1 / 6)  # only question 0 cites the gold passages
    a, c = got["answer_f1"], got["citation_f1"]
    assert got["joint_f1"] == pytest.approx(2 * a * c / (a + c))  # of the aggregates, not a mean of per-row joints
    assert got["joint_f1"] != pytest.approx(statistics.mean([1.0, 0, 0, 0, 0, 0]))
    assert got["format"] == pytest.approx((1 + 1 + 4 * 0.5) / 6)
    for key in ("reward", "answer_f1", "citation_f1", "joint_f1", "format"):
        lo, hi = got[f"{key}_ci"]
        assert lo <= got[key] <= hi and lo < hi, key

    runs = [{"arm": arm, "seed": seed, "level": level, "before": got, "after": got}
            for arm in ("max", "linear", "min-max") for seed in (0, 1) for level in ("level 3", "level 1")]
    bench.plot_schedules(runs, tmp_path / "schedules.png", "schedules")
    assert (tmp_path / "schedules.png").stat().st_size > 10_000


def test_a_rerun_reuses_the_finished_runs_only_under_the_same_settings_and_inputs(tmp_path):
    """A rerun with more arms (``--orders``) or seeds trains and scores only what is new: the earlier summary's runs
    are reused when every setting the results depend on is the same and so are the inputs (the starting weights,
    each arm's train rows, the held-out rows, by content); none, or only the unchanged ones, otherwise."""
    bench = _bench()
    args = bench.parser().parse_args(["--schedules", "max,linear", "--K", "3", "--steps", "3", "--out", str(tmp_path)])
    inputs = {"start": {"model.safetensors": "a" * 64}, "train": {"max": "m", "linear": "l"},
              "held": {"level 3": "h3", "level 1": "h1"}}
    runs = [{"arm": arm, "seed": 0, "level": level, "before": {}, "after": {}}
            for arm in ("start", "max", "linear") for level in ("level 3", "level 1")]
    bench.write_json(tmp_path / "summary.json", {"args": vars(args), "inputs": inputs, "runs": runs})
    assert not list(tmp_path.glob("*.tmp"))
    every = {(arm, 0, level) for arm in ("start", "max", "linear") for level in ("level 3", "level 1")}

    more = bench.parser().parse_args(["--schedules", "max,linear", "--orders", "shuffled", "--K", "3", "--steps", "3",
                                      "--seeds", "4", "--out", str(tmp_path)])
    assert set(bench.finished_runs(tmp_path / "summary.json", more, inputs)) == every
    for other in (["--steps", "4"], ["--eval-rows", "8"], ["--override", "grpo.bf16=false"], ["--warm-start", "32"]):
        changed = bench.parser().parse_args(["--schedules", "max,linear", "--K", "3", "--steps", "3", *other])
        assert bench.finished_runs(tmp_path / "summary.json", changed, inputs) == {}, other
    assert bench.finished_runs(tmp_path / "absent.json", more, inputs) == {}
    # another starting model (a warm start redone in place): nothing; other rows for one arm or level: not those
    assert bench.finished_runs(tmp_path / "summary.json", more, {**inputs, "start": {"model.safetensors": "b" * 64}}) == {}
    assert set(bench.finished_runs(tmp_path / "summary.json", more, {**inputs, "train": {"max": "m2", "linear": "l"}})) \
        == every - {("max", 0, "level 3"), ("max", 0, "level 1")}
    assert set(bench.finished_runs(tmp_path / "summary.json", more, {**inputs, "held": {"level 3": "x", "level 1": "h1"}})) \
        == {k for k in every if k[2] == "level 1"}


@pytest.mark.slow
def test_a_finished_training_run_is_reused_only_from_the_same_weights_rows_and_settings(tmp_path, monkeypatch):
    """train_run keeps a finished run only when bench_inputs.json says it was trained from these very inputs: the
    starting weights changed in place at the same size, or another seed, trains it again from an empty folder."""
    bench = _bench()
    from rag_curriculum import train as train_module

    shards = bench.build(tmp_path / "train", bench.TRAIN, 4, schedule="max", K=2)
    model = tmp_path / "start"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    trained = []

    def fake_train(cfg):
        out = Path(cfg.run.output_dir)
        assert not out.exists() or not any(out.iterdir()), "a run is trained into an empty folder"
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.safetensors").write_bytes(b"trained")
        trained.append(cfg.grpo["seed"])

    monkeypatch.setattr(train_module, "train", fake_train)
    kw = dict(seed=0, lr=1e-5, steps=1, prompts=2, generations=2, max_tokens=8)
    run = tmp_path / "run"
    bench.train_run(str(model), shards, run, **kw)
    bench.train_run(str(model), shards, run, **kw)
    assert trained == [0], "the second call reuses the finished run"
    (model / "model.safetensors").write_bytes(b"\1" + b"\0" * 4095)  # same size, other bytes
    bench.train_run(str(model), shards, run, **kw)
    bench.train_run(str(model), shards, run, **{**kw, "seed": 1})
    assert trained == [0, 0, 1]
    (run / "bench_inputs.json").unlink()  # a run that died before its record: not trusted
    bench.train_run(str(model), shards, run, **{**kw, "seed": 1})
    assert trained == [0, 0, 1, 1]


@pytest.mark.slow
def test_an_ordering_that_gives_another_arms_rows_is_found_out(tmp_path):
    """Every HotpotQA question has 2 hops, so ordering the linear curriculum by hops then level gives the linear
    curriculum itself: the bench trains it once (the same rows in the same order), while a shuffled order differs."""
    bench = _bench()
    linear = bench.build(tmp_path / "linear", bench.TRAIN, 12, schedule="linear", K=3)
    hops = bench.build(tmp_path / "hops", bench.TRAIN, 12, schedule="linear", K=3, order="hops-level")
    shuffled = bench.build(tmp_path / "shuffled", bench.TRAIN, 12, schedule="linear", K=3, order="shuffled")
    assert bench.same_curriculum(linear, hops)
    assert not bench.same_curriculum(linear, shuffled)
    assert not bench.same_curriculum(linear, bench.build(tmp_path / "max", bench.TRAIN, 12, schedule="max", K=3))


@pytest.mark.slow
def test_the_schedule_comparison_runs_end_to_end_and_a_rerun_trains_nothing(tmp_path):
    """The bench's --schedules mode as a user runs it, on a tiny model made here and the shared HotpotQA rows: real
    curricula, real GRPO steps (TRL), real generation and scoring; the arm "start" is scored untrained, an ordering
    that gives linear's very rows is trained once, schedules.png is drawn; a second run with the same settings
    trains and scores nothing again, and one whose starting weights changed in place reuses nothing."""
    import json
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from support.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model", SAMPLE.parents[1])
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_real_learning.py"), "--model", str(model), "--schedules",
           "max,linear", "--orders", "hops-level", "--K", "2", "--seeds", "1", "--steps", "1", "--prompts", "2",
           "--generations", "2", "--train-rows", "2", "--eval-rows", "2", "--eval-samples", "1", "--max-tokens", "4",
           "--out", str(out)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "linear-hops-level: the same rows in the same order as linear" in first.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert {(r["arm"], r["level"]) for r in summary["runs"]} == {
        (arm, level) for arm in ("start", "max", "linear") for level in ("level 2", "level 1")}
    assert all(r["train_seconds"] == 0 for r in summary["runs"] if r["arm"] == "start")
    assert not (out / "run-start-seed0").exists() and (out / "run-max-seed0" / "model.safetensors").is_file()
    assert (out / "schedules.png").stat().st_size > 10_000
    for r in summary["runs"]:
        assert set(r["after"]) >= {"reward", "answer_f1", "citation_f1", "joint_f1", "joint_f1_ci"}

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("trained and scored by an earlier run") == 3 and "trained again" not in again.stdout

    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the same size, one bit of the starting weights
    weights.write_bytes(bytes(data))
    third = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "another starting model; nothing in it is reused" in third.stdout
    assert "trained and scored by an earlier run" not in third.stdout and third.stdout.count("trained again") == 2
