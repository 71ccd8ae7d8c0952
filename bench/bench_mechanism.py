"""GRPO's informative-group mechanism, measured on a CPU: curricula compared by the share of groups that teach.

A GRPO group of G samples has a non-zero advantage only when its rewards differ (an *informative* group); a
question the model answers with probability p gives one with probability 1 - p^G - (1 - p)^G. This bench takes the
warm-started tiny model of docs/learning.md (``curriculum warm-start``: a tiny model taught RAG-RL's answer format
on the first ``--warm-rows`` training questions, here at level 1 so that no schedule is favoured), and

1. profiles it (``curriculum profile``'s library function, the transformers backend) on the training questions at
   every level 1..K, ``--profile-samples`` samples each, scored and sampled as ``recipe=cpu-learn`` trains;
2. builds the arms from the same ``--rows`` MuSiQue train questions with ``--profile`` (``curriculum build
   --profile``): max, min-max, min-max shuffled (the same rows, permuted) and calibrated (``--schedule calibrated``,
   each question at the level where its measured pass rate is nearest 0.5); also ``calibrated informative``
   (``--target-informative 1``: each question at its most informative level) and ``informative`` (adaptive shards
   and ``adaptive.controller=informative``: its first batch placed as ``calibrated informative``'s, then each batch
   at the levels the forecast refreshed from the rollouts gives). Each build's manifest gives the
   schedule's **predicted** informative fraction (the card's figure, ``profile.this_build``); the rows each step
   will train give the predicted fraction per step;
3. trains each arm with TRL's GRPOTrainer (``recipe=cpu-learn``: the RAG-RL reward, learning rate ``--lr``) for
   ``--steps`` steps of ``--prompts`` x ``--generations`` (equal completions in every arm), once per seed, and reads
   the **measured** informative fraction per step as TRL logs it: 1 - ``frac_reward_zero_std``;
4. scores the untrained start and every trained model on held-out rows (the MuSiQue dev sample at level K,
   ``--eval-rows`` x ``--eval-samples``, temperature 0.7, the sampling seeded by the run's seed: the start and every
   arm of one seed draw alike), outside the run's log, with the RAG-RL reward; each arm's difference to min-max and
   to the start, paired by seed, with a percentile bootstrap 95% interval over the seeds.

The profile scores each sample with the reward the training uses (``--recipe cpu-learn``: the RAG-RL total of
format, answer and citations), sampled as the training samples, so its prediction and TRL's measured fraction
count the same thing. Each run also gives the trainer's check (``data.profile``): per quarter of the steps, the
static prediction, the refreshed forecast (each question's posterior over reward values, updated from its groups)
and the measured fraction, so the drift at the real learning rate is read from the same runs.

Prints a table, writes ``summary.json`` (settings, input digests, every run's per-step figures, per-arm figures
with intervals) and ``mechanism.png`` into ``--out``; a finished run there is reused when its start, rows and
settings are the same. No timed assertion.

    python bench/bench_mechanism.py --out outputs/mechanism                 # 4 arms x 5 seeds x 32 steps
    python bench/bench_mechanism.py --quick --out outputs/mechanism-quick   # 2 arms x 1 seed x 4 steps
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import SHARED  # noqa: E402
from bench_real_learning import build_digest, evaluate, weights_digest, write_json  # noqa: E402

TRAIN = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
HELD_OUT = SHARED / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"
#: arm -> (schedule, order)
ARMS = {"max": ("max", "level"), "min-max": ("min-max", "level"), "min-max shuffled": ("min-max", "shuffled"),
        "calibrated": ("calibrated", "level"), "calibrated informative": ("calibrated", "level"),
        "informative": ("adaptive", "level")}
#: an arm's build settings beyond its schedule: calibrated on the informative forecast (the most informative level)
BUILD_EXTRA = {"calibrated informative": {"target_informative": 1.0}}
#: an arm's training settings beyond the bench's: the adaptive controller on the refreshed informative forecast,
#: which places its first batch as "calibrated informative" does and then follows the rollouts
TRAIN_EXTRA = {"informative": ["adaptive.controller=informative"]}
REFERENCE = "min-max"
BOOTSTRAP_RESAMPLES = 2000


def seed_bootstrap(values: list[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict:
    """The mean of per-seed values (paired differences, or one arm's figure) with a percentile bootstrap 95%
    interval over the seeds (the toolkit's bootstrap helpers resample questions; here the unit is the seed).

    >>> seed_bootstrap([1.0, 1.0, 1.0])["ci"]
    [1.0, 1.0]
    """
    import numpy as np

    a = np.asarray(values, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(a), size=(resamples, len(a)))
    boot = a[idx].mean(axis=1)
    return {"mean": round(float(a.mean()), 6), "ci": [round(float(np.percentile(boot, 2.5)), 6),
                                                      round(float(np.percentile(boot, 97.5)), 6)],
            "seeds": len(a)}


def build(out: Path, path: Path, n: int, K: int, *, schedule: str = "max", order: str = "level",
          profile: Path | None = None, held_out: bool = False, dataset: str = "musique",
          **extra: object) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if not (out / "manifest.json").is_file():
        build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(path), n=n, K=K)], schedule=schedule,
                                     order=order, out=str(out), seed=0, allow_split_mismatch=held_out,
                                     profile=str(profile) if profile else None, **extra), command="bench")
    return out


def warm(out: Path, *, rows: int, warm_rows: int, epochs: float) -> Path:
    """The tiny model of docs/learning.md, warm-started on the first ``warm_rows`` training questions at level 1."""
    from rag_curriculum.train import WarmStartConfig, warm_start

    folder = out / "warm"
    card = folder / "warm_start.json"
    asked = {"rows": warm_rows, "epochs": epochs}
    if card.is_file():
        was = json.loads(card.read_text())["settings"]
        if all(was.get(k) == v for k, v in asked.items()):
            return folder
        raise SystemExit(f"{folder}: a warm start with other settings than {asked}: give another --out")
    shards = build(out / "warm-rows", TRAIN, rows, 1)
    r = warm_start(WarmStartConfig(shards=str(shards), out=str(folder), rows=warm_rows, epochs=epochs))
    print(f"warm start: {r.examples} examples, loss {r.loss_first:.3f} -> {r.loss_last:.3f}, {r.seconds:.0f} s",
          flush=True)
    return folder


def make_profile(out: Path, model: Path, *, rows: int, K: int, samples: int, recipe: str = "cpu-learn",
                 seed: int = 0, max_tokens: int | None = None, group_size: int | None = None,
                 dataset: str = "musique", path: Path = TRAIN) -> Path:
    """``curriculum profile`` of ``model`` on the training questions (``dataset`` at ``path``) at levels 1..K, scored and sampled as
    ``recipe`` trains: its reward (the RAG-RL total), temperature, top-p, completion length and G, the last two
    overridden when given as the training overrides them (resumed when there)."""
    from rag_curriculum.partition import ProfileConfig, profile

    folder = out / "profile"
    # the profile's run identity digests the model folder's config and tokenizer, not its weights: a model
    # warm-started again in place would resume the old samples, so the weights it profiled are checked here
    record, start = out / "profile_start.json", {"start": weights_digest(str(model)), "recipe": recipe,
                                                 "samples": samples,
                                                 **({"max_tokens": max_tokens} if max_tokens else {}),
                                                 **({"group_size": group_size} if group_size else {})}
    if folder.exists() and (not record.is_file() or json.loads(record.read_text()) != start):
        raise SystemExit(f"{folder}: a profile of other weights or settings: remove it, or give another --out")
    write_json(record, start)
    res = profile(ProfileConfig(dataset=dataset, input=str(path), n=rows, K=K,
                                levels=",".join(str(lv) for lv in range(1, K + 1)), out=str(folder),
                                backend="transformers", model=str(model), samples=samples, recipe=recipe,
                                seed=seed, max_tokens=max_tokens, group_size=group_size), command="bench")
    if not res.complete:
        raise SystemExit(f"{folder}: the profile stopped before the end; run again to finish it")
    return folder


def predicted_per_step(shards: Path, profile_dir: Path, *, steps: int, prompts: int, group_size: int) -> list[float]:
    """The profile's expected informative fraction of the rows each step trains (in curriculum order, from the
    start again when the steps outrun the rows)."""
    from rag_curriculum.difficulty.profile import read_profile
    from rag_curriculum.shards import read_rows

    prof = read_profile(profile_dir)
    rows = [(r["id"], int(r["level"])) for r in read_rows(shards)]
    return [round(prof.informative([rows[(s * prompts + i) % len(rows)] for i in range(prompts)], group_size), 6)
            for s in range(steps)]


def train_run(model: Path, shards: Path, out: Path, *, seed: int, steps: int, prompts: int, generations: int,
              rows: int, max_tokens: int, lr: float, profile_dir: Path, extra: list[str] | None = None) -> dict:
    """One ``recipe=cpu-learn`` run; its per-step figures from TRL's log and the trainer's check of the profile's
    prediction (``informative.json``: predicted, refreshed and measured per step and per quarter), reused when done
    from the same inputs."""
    import shutil

    from rag_curriculum.train import compose_train_config, train

    settings = [f"model.name_or_path={model}", f"data.shards={shards}", f"data.max_rows={rows}",
                f"run.output_dir={out}", f"grpo.seed={seed}", f"grpo.max_steps={steps}", f"grpo.save_steps={steps}",
                f"batch.prompts_per_step={prompts}", f"grpo.num_generations={generations}",
                f"batch.per_device_completions={prompts * generations}", f"grpo.max_completion_length={max_tokens}",
                f"grpo.learning_rate={lr}", f"data.profile={profile_dir}", "grpo.logging_steps=1",
                "run.save_final=true", *(extra or [])]
    from rag_curriculum._plumbing import file_sha256

    identity = {"start": weights_digest(str(model)), "train": build_digest(shards), "settings": settings,
                "profile": file_sha256(profile_dir / "profile.parquet")}
    record = out / "bench_run.json"
    if record.is_file() and (got := json.loads(record.read_text()))["identity"] == identity:
        return got["run"]
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    result = train(compose_train_config("cpu-learn", settings))
    seconds = time.perf_counter() - t
    steps_log = [h for h in result.log_history if "frac_reward_zero_std" in h]
    run = {"seconds": round(seconds, 2), "steps": len(steps_log),
           "informative": [round(1.0 - float(h["frac_reward_zero_std"]), 6) for h in steps_log],
           "reward": [round(float(h["reward"]), 6) for h in steps_log], "check": result.informative,
           "load_average": round(os.getloadavg()[0], 2)}
    write_json(record, {"identity": identity, "run": run})
    return run


def replay(run_dir: Path, *, decay: float = 0.9) -> list[dict]:
    """A run's ``step_metrics.jsonl`` with the forecasts made again step by step: the profile's (``p``), each
    question's refreshed posterior (``q0``: ``q`` in a run logged before the drift factor) and that times the drift
    factor pooled over questions (``q``: :class:`~rag_curriculum.difficulty.profile.DriftFactor`), beside the
    measured groups."""
    from rag_curriculum.difficulty.profile import DriftFactor
    from rag_curriculum.train._informative import read_step_metrics

    factor, out = DriftFactor(decay=decay), []
    for line in read_step_metrics(run_dir / "step_metrics.jsonl"):
        q0 = line.get("q0", line["q"])
        f = factor.factor()
        out.append({"step": line["step"], "p": line["p"], "q0": q0, "q": [min(1.0, x * f) for x in q0],
                    "m": [bool(m) for m in line["informative"]], "level": line["levels"]})
        factor.observe(line["informative"], q0)
    return out


def drift(run_dirs: list[Path], *, quarters: int = 4) -> list[dict]:
    """Per quarter of the steps, over the seeds' runs of one arm: the mean static prediction, refreshed forecast
    (each question's posterior), the same times the drift factor, and the measured fraction, with each forecast's
    mean absolute error against the measured one per run."""
    per_run = [replay(d) for d in run_dirs]
    n = min(len(r) for r in per_run)
    k = max(1, -(-n // quarters))
    rows = []
    for i in range(0, n, k):
        spans = [r[i:i + k] for r in per_run]

        def mean(key: str, span: list[dict]) -> float:
            values = [x for s in span for x in s[key]]
            return sum(float(v) for v in values) / len(values)

        row = {"steps": [spans[0][0]["step"], spans[0][-1]["step"]], "runs": len(spans)}
        for key, name in (("p", "predicted"), ("q0", "posterior"), ("q", "refreshed"), ("m", "measured"),
                          ("level", "level_mean")):
            row[name] = round(statistics.mean(mean(key, sp) for sp in spans), 6)
        for key, name in (("p", "static"), ("q0", "posterior"), ("q", "refreshed")):
            row[f"{name}_abs_error"] = round(statistics.mean(abs(mean(key, sp) - mean("m", sp)) for sp in spans), 6)
        rows.append(row)
    return rows


def mechanism(out: Path, *, arms: list[str], seeds: list[int], steps: int = 32, prompts: int = 2,
              generations: int = 4, rows: int | None = None, K: int = 3, warm_rows: int = 8,
              warm_epochs: float = 20.0, profile_samples: int = 8, eval_rows: int = 32, eval_samples: int = 2,
              max_tokens: int = 128, lr: float = 3e-4, warm_from: Path | None = None,
              reference: str | None = None) -> dict:
    """Warm start, profile, build, train every arm at every seed, score held out; the summary (also written to
    ``out/summary.json``)."""
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    if reference is not None and reference not in arms:
        raise SystemExit(f"--reference {reference!r} is not one of the arms trained ({', '.join(arms)})")
    out.mkdir(parents=True, exist_ok=True)
    rows = rows or steps * prompts
    if warm_from is None and warm_rows > rows:
        raise SystemExit(f"--warm-rows {warm_rows} is more than the {rows} training questions: give --rows "
                         f"{warm_rows} or more, or fewer --warm-rows")
    t0 = time.perf_counter()
    model = warm_from or warm(out, rows=rows, warm_rows=warm_rows, epochs=warm_epochs)
    t_warm = time.perf_counter() - t0
    t = time.perf_counter()
    # as the runs train: cpu-learn's reward and sampling, with the bench's G and completion length (the recipe's
    # own, 4 and 128, by default: the profile then is the one a plain --recipe cpu-learn makes)
    prof = make_profile(out, model, rows=rows, K=K, samples=profile_samples,
                        max_tokens=None if max_tokens == 128 else max_tokens,
                        group_size=None if generations == 4 else generations)
    t_profile = time.perf_counter() - t
    per_level = json.loads((prof / "profile.json").read_text())["per_level"]
    builds = {a: build(out / f"train-{a.replace(' ', '-')}", TRAIN, rows, K, schedule=ARMS[a][0],
                       order=ARMS[a][1], profile=prof, **BUILD_EXTRA.get(a, {})) for a in arms}
    held_dir = build(out / f"held-out-K{K}", HELD_OUT, eval_rows, K, held_out=True)
    from rag_curriculum.shards import read_rows

    held = read_rows(held_dir)
    predicted = {}
    for a, shards in builds.items():
        record = json.loads((shards / "manifest.json").read_text())["profile"]
        predicted[a] = {"whole": record["this_build"]["whole"], "first_quarter": record["this_build"]["first_quarter"],
                        "last_quarter": record["this_build"]["last_quarter"],
                        "mean_pass_rate": record["this_build"]["mean_pass_rate"],
                        "profiled_questions": record["profiled_questions"], "questions": record["questions"],
                        "per_step": predicted_per_step(shards, prof, steps=steps, prompts=prompts,
                                                       group_size=generations)}
    from rag_curriculum._plumbing import file_sha256

    inputs = {"start": weights_digest(str(model)), "profile": file_sha256(prof / "profile.parquet"),
              "train": {a: build_digest(s) for a, s in builds.items()}, "held": build_digest(held_dir)}
    runs: list[dict] = []
    start_scores: dict[int, dict] = {}
    for seed in seeds:
        start_scores[seed] = evaluate(str(model), held, samples=eval_samples, seed=10_000 + seed,
                                      max_tokens=max_tokens)
        for a in arms:
            folder = out / "runs" / f"{a.replace(' ', '-')}-seed{seed}"
            r = train_run(model, builds[a], folder, seed=seed, steps=steps, prompts=prompts,
                          generations=generations, rows=rows, max_tokens=max_tokens, lr=lr, profile_dir=prof,
                          extra=TRAIN_EXTRA.get(a))
            after = evaluate(str(folder), held, samples=eval_samples, seed=10_000 + seed, max_tokens=max_tokens)
            runs.append({"arm": a, "seed": seed, **r, "held_out": after,
                         "informative_mean": round(statistics.mean(r["informative"]), 6) if r["informative"] else None})
            print(f"bench run: {a}, seed {seed}: informative {runs[-1]['informative_mean']} (predicted "
                  f"{predicted[a]['whole']}), held-out reward {after['reward']:.3f} (start "
                  f"{start_scores[seed]['reward']:.3f}), {r['seconds']:.0f} s", flush=True)
    reference = reference or (REFERENCE if REFERENCE in arms else arms[0])  # paired differences: against this arm
    per_arm = {}
    for a in arms:
        mine = {r["seed"]: r for r in runs if r["arm"] == a}
        entry = {"predicted": predicted[a],
                 "informative": seed_bootstrap([mine[s]["informative_mean"] for s in seeds]),
                 "held_out_reward": seed_bootstrap([mine[s]["held_out"]["reward"] for s in seeds]),
                 "vs_start": seed_bootstrap([mine[s]["held_out"]["reward"] - start_scores[s]["reward"]
                                             for s in seeds])}
        dirs = [out / "runs" / f"{a.replace(' ', '-')}-seed{s}" for s in seeds]
        if all((d / "step_metrics.jsonl").is_file() for d in dirs):
            entry["drift"] = drift(dirs)
        if a != reference:
            ref = {r["seed"]: r for r in runs if r["arm"] == reference}
            entry["vs_reference"] = seed_bootstrap([mine[s]["held_out"]["reward"] - ref[s]["held_out"]["reward"]
                                                  for s in seeds])
        per_arm[a] = entry
    train_seconds = [r["seconds"] for r in runs if r["seconds"]]
    summary = {
        "kind": "mechanism-bench",
        "settings": {"arms": arms, "seeds": seeds, "steps": steps, "prompts": prompts, "generations": generations,
                     "completions_per_run": steps * prompts * generations, "rows": rows, "K": K,
                     "warm_rows": warm_rows, "warm_epochs": warm_epochs, "warm_from": str(warm_from or ""),
                     "profile_samples": profile_samples, "eval_rows": eval_rows, "eval_samples": eval_samples,
                     "max_tokens": max_tokens, "lr": lr, "recipe": "cpu-learn", "reward": "rag-rl",
                     "reference": reference},
        "inputs": inputs,
        "profile": {"path": str(prof), "per_level": {lv: {k: v[k] for k in ("pass_rate", "pass_rate_ci",
                                                                             "informative", "informative_ci")}
                                                     for lv, v in per_level.items()}},
        "start": {"held_out": {str(s): v for s, v in start_scores.items()},
                  "held_out_reward": seed_bootstrap([start_scores[s]["reward"] for s in seeds])},
        "arms": per_arm,
        "runs": runs,
        "seconds": {"warm_start": round(t_warm, 1), "profile": round(t_profile, 1),
                    "train_total": round(sum(train_seconds), 1),
                    "per_step": round(sum(train_seconds) / sum(r["steps"] for r in runs), 3) if train_seconds
                    else None,
                    "total": round(time.perf_counter() - t0, 1)},
        "load_average": round(os.getloadavg()[0], 2),
    }
    write_json(out / "summary.json", summary)
    plot(summary, out / "mechanism.png")
    return summary


def plot(summary: dict, path: Path) -> None:
    """Left: measured informative fraction per step, the mean over seeds with the seeds' range as a band, the
    profile's prediction dashed. Right: held-out reward minus the reference arm (min-max when trained, else the
    first arm; minus the start with one arm) with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["#3b7dd8", "#d8663b", "#4a9a4a", "#9a4a9a", "#c8a13b", "#3bb8c8"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for color, (a, entry) in zip(colors, summary["arms"].items(), strict=False):
        curves = [r["informative"] for r in summary["runs"] if r["arm"] == a]
        n = min(len(c) for c in curves)
        xs = list(range(1, n + 1))
        mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
        ax.plot(xs, mean, color=color, label=f"{a} (measured)")
        ax.fill_between(xs, [min(c[i] for c in curves) for i in range(n)], [max(c[i] for c in curves)
                                                                            for i in range(n)],
                        color=color, alpha=0.15)
        ax.plot(xs, entry["predicted"]["per_step"][:n], color=color, ls="--", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("informative groups (1 - frac_reward_zero_std)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("measured (solid, seeds' range) and predicted (dashed)", fontsize=9)
    ax.legend(fontsize=7)
    key = "vs_reference" if any("vs_reference" in e for e in summary["arms"].values()) else "vs_start"
    ref = summary["settings"]["reference"]
    names = [a for a, e in summary["arms"].items() if key in e]
    for i, a in enumerate(names):
        d = summary["arms"][a][key]
        bx.errorbar([i], [d["mean"]], yerr=[[d["mean"] - d["ci"][0]], [d["ci"][1] - d["mean"]]], marker="o",
                    capsize=4, color=colors[list(summary["arms"]).index(a) % len(colors)])
    bx.axhline(0, color="#999999", lw=1, ls="--")
    bx.set_xticks(range(len(names)))
    bx.set_xticklabels(names, fontsize=8)
    bx.set_ylabel(f"held-out reward, {'minus ' + ref if key == 'vs_reference' else 'minus the start'}")
    bx.set_title(f"paired by seed, bootstrap 95% ({len(summary['settings']['seeds'])} seeds)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    s = summary["settings"]
    table = Table(title=f"{s['steps']} steps x {s['prompts']} prompts x {s['generations']} generations, "
                        f"{len(s['seeds'])} seed(s); held out: {s['eval_rows']} MuSiQue dev rows at level {s['K']}",
                  title_justify="left")
    for col in ("arm", "informative predicted", "informative measured (95%)", "held-out reward (95%)",
                f"minus {s['reference']} (95%)", "minus start (95%)"):
        table.add_column(col, justify="right")

    def fmt(d: dict | None) -> str:
        return "-" if d is None else f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"

    start = summary["start"]["held_out_reward"]
    table.add_row("start", "-", "-", f"{start['mean']:.3f} [{start['ci'][0]:.3f}, {start['ci'][1]:.3f}]", "-", "-")
    for a, e in summary["arms"].items():
        m, h = e["informative"], e["held_out_reward"]
        table.add_row(a, f"{e['predicted']['whole']:.3f}", f"{m['mean']:.3f} [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]",
                      f"{h['mean']:.3f} [{h['ci'][0]:.3f}, {h['ci'][1]:.3f}]", fmt(e.get("vs_reference")),
                      fmt(e["vs_start"]))
    Console(width=150).print(table)
    sec = summary["seconds"]
    print(f"warm start {sec['warm_start']:.0f} s, profile {sec['profile']:.0f} s, training {sec['train_total']:.0f} s "
          f"({sec['per_step']} s a step), total {sec['total']:.0f} s at load average {summary['load_average']}")


def report_drift(summary: dict) -> None:
    """Per arm and quarter of the steps: the static prediction, the refreshed forecast and the measured fraction
    (means over the seeds), with each forecast's mean absolute error per run."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="the prediction as the model learns: static (the profile), each question's posterior, "
                        "that times the drift factor (refreshed); means over seeds, |error| per run",
                  title_justify="left")
    for col in ("arm", "steps", "mean level", "predicted", "posterior", "refreshed", "measured", "|static error|",
                "|posterior error|", "|refreshed error|"):
        table.add_column(col, justify="right")
    for a, e in summary["arms"].items():
        for i, w in enumerate(e.get("drift", [])):
            table.add_row(a if i == 0 else "", f"{w['steps'][0]}-{w['steps'][1]}",
                          *(f"{w[k]:.3f}" for k in ("level_mean", "predicted", "posterior", "refreshed", "measured",
                                                    "static_abs_error", "posterior_abs_error",
                                                    "refreshed_abs_error")))
    Console(width=150).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--seeds", type=int, default=5, help="GRPO seeds 0..N-1 (5 or more for intervals)")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--generations", type=int, default=4, help="the group size G")
    ap.add_argument("--rows", type=int, default=None, help="training questions [default: steps x prompts]")
    ap.add_argument("--K", type=int, default=3)
    ap.add_argument("--warm-rows", type=int, default=8)
    ap.add_argument("--warm-epochs", type=float, default=20.0)
    ap.add_argument("--warm-from", type=Path, default=None, help="a warm-started model folder to start from instead")
    ap.add_argument("--profile-samples", type=int, default=8)
    ap.add_argument("--eval-rows", type=int, default=32)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--quick", action="store_true", help="2 arms (max, min-max), 1 seed, 4 steps, 8 rows, 8 held-out "
                    "rows, a 5-epoch warm start: a look, no intervals")
    ap.add_argument("--reference", default=None, help="the arm paired differences are taken against [default: "
                    "min-max when trained, else the first arm]")
    ap.add_argument("--out", type=Path, default=Path("outputs/mechanism"))
    a = ap.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    if a.quick:
        arms, a.seeds, a.steps, a.rows, a.eval_rows, a.warm_epochs = ["max", "min-max"], 1, 4, 8, 8, 5.0
        a.profile_samples = 4
    summary = mechanism(a.out, arms=arms, seeds=list(range(a.seeds)), steps=a.steps, prompts=a.prompts,
                        generations=a.generations, rows=a.rows, K=a.K, warm_rows=a.warm_rows,
                        warm_epochs=a.warm_epochs, profile_samples=a.profile_samples, eval_rows=a.eval_rows,
                        eval_samples=a.eval_samples, max_tokens=a.max_tokens, lr=a.lr, warm_from=a.warm_from,
                        reference=a.reference)
    report(summary)
    report_drift(summary)
    print(f"wrote {a.out / 'summary.json'} and {a.out / 'mechanism.png'}")


if __name__ == "__main__":
    main()
