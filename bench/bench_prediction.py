"""The level profile's informative-group prediction, checked at learning rate 0: where the model does not move, the
share of GRPO groups whose training rewards differ must match what the profile predicted, within sampling error.

On the warm-started tiny model of docs/learning.md (``bench_mechanism.warm``; or ``--warm-from`` any warm-started
model folder, e.g. Gemma 3 270M's), this bench

1. profiles the model (``curriculum profile``'s library function, transformers backend) on the training questions
   at every level 1..K with ``--recipe`` (default ``cpu-learn``): each sample scored with the recipe's reward (the
   RAG-RL total), sampled with its temperature, top-p, completion length and G;
2. builds each arm from the same questions with ``--profile``: max, min-max, min-max shuffled, calibrated (each
   question at the level whose reward-based informative probability is highest, ``--target-informative``);
3. trains each arm with the same recipe at learning rate 0 for ``--steps`` steps, the trainer checking the prediction
   as it goes (``informative.json``: each step's predicted fraction over exactly the rows the ledger says it trained,
   and the measured one, 1 - TRL's ``frac_reward_zero_std``);
4. reports per arm the mean measured fraction against the prediction's 95% binomial (Poisson-binomial) interval over
   its groups, per level too, and whether it lies inside.

Writes ``summary.json`` into ``--out`` and prints the table; a finished arm in ``--out`` is reused when its inputs
are the same.

    python bench/bench_prediction.py --out outputs/prediction                    # 4 arms x 32 steps, tiny model
    python bench/bench_prediction.py --quick --out outputs/prediction-quick      # 2 arms x 4 steps: a look

Gemma 3 270M warm-started (``curriculum warm-start``, docs/learning.md), on 2WikiMultihopQA (its passages are the
shortest of the three datasets: a step of 1 prompt x 4 generations takes about 27 s on 2 cores):

    python bench/bench_prediction.py --warm-from outputs/gemma-warm --recipe cpu-gemma --dataset 2wikimultihopqa \
        --input ../shared/data/2wikimultihopqa/train.sample500.json --rows 16 --prompts 1 \
        --override dataset=2wikimultihopqa --override batch.per_device_completions=4 --out outputs/lr0-gemma
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_mechanism import ARMS, BUILD_EXTRA, TRAIN, TRAIN_EXTRA, build, make_profile, warm  # noqa: E402
from bench_real_learning import build_digest, weights_digest, write_json  # noqa: E402

#: the arms checked by default: the schedules a build places before training
CHECKED = ["max", "min-max", "min-max shuffled", "calibrated"]


def without_replacement(values: list[float], group_size: int) -> float:
    """The probability that ``group_size`` of a question's ``n`` recorded sample rewards, drawn without replacement,
    are not all equal: ``1 - sum_v C(n_v, G) / C(n, G)``, an unbiased estimate of the informative probability (the
    empirical distribution's ``1 - sum_v (n_v / n)^G`` is biased low: it counts a value seen once as more likely to
    fill a group than it is). Needs ``n >= G``.

    >>> without_replacement([0.0, 0.0, 1.0, 1.0], 2), without_replacement([1.0] * 4, 2)
    (0.6666666666666667, 0.0)
    """
    from collections import Counter
    from math import comb

    n = len(values)
    return 1.0 - sum(comb(c, group_size) for c in Counter(values).values()) / comb(n, group_size)


def unbiased_check(profile_dir: Path, run_dir: Path, group_size: int) -> dict:
    """The run's groups compared with the unbiased estimate of each row's informative probability (from the
    profile's recorded sample rewards) instead of the profile's empirical-distribution one."""
    import pyarrow.parquet as pq

    from rag_curriculum.train._informative import compare, read_step_metrics

    table = pq.read_table(profile_dir / "profile.parquet", columns=["id", "level", "sample_reward"]).to_pylist()
    rewards = {(r["id"], int(r["level"])): r["sample_reward"] for r in table if r["sample_reward"]}
    from rag_curriculum.shards import read_rows

    ids = {r["curriculum_index"]: r["id"] for r in read_rows(Path(json.loads(
        (run_dir / "train_plan.json").read_text())["shards"]))}
    groups, per_level = [], {}
    for line in read_step_metrics(run_dir / "step_metrics.jsonl"):
        for idx, level, inf in zip(line["rows"], line["levels"], line["informative"], strict=True):
            p = without_replacement(rewards[(ids[idx], int(level))], group_size)
            groups.append((p, bool(inf)))
            per_level.setdefault(str(level), []).append((p, bool(inf)))
    return {"whole": compare(groups), "per_level": {lv: compare(g) for lv, g in sorted(per_level.items())},
            "groups": [[round(p, 6), int(m)] for p, m in groups]}


def pooled(runs: dict, out: Path) -> dict:
    """Every arm's groups together: the profile's prediction and the unbiased estimate against what was measured."""
    from rag_curriculum.train._informative import compare, read_step_metrics

    plug = [(p, bool(m)) for a in runs for line in read_step_metrics(out / "runs" / a.replace(" ", "-") /
                                                                     "step_metrics.jsonl")
            for p, m in zip(line["p"], line["informative"], strict=True)]
    unbiased = [(p, bool(m)) for r in runs.values() for p, m in r["unbiased"]["groups"]]
    return {"profile": compare(plug), "unbiased": compare(unbiased)}


def run_identity(model: Path, shards: Path, profile_dir: Path, settings: list[str]) -> dict:
    """What a finished training run is reused by: its start weights, its curriculum, its settings and the profile it
    was checked against (any change trains it again)."""
    from rag_curriculum._plumbing import file_sha256

    return {"start": weights_digest(str(model)), "train": build_digest(shards), "settings": settings,
            "profile": file_sha256(profile_dir / "profile.parquet")}


def train_arm(model: Path, shards: Path, profile_dir: Path, out: Path, *, recipe: str, steps: int, rows: int,
              seed: int, overrides: list[str]) -> dict:
    """One arm at learning rate 0 with the trainer's check of the prediction; its ``informative.json``."""
    import shutil

    from rag_curriculum.train import compose_train_config, train

    settings = [f"model.name_or_path={model}", f"data.shards={shards}", f"data.max_rows={rows}",
                f"data.profile={profile_dir}", f"run.output_dir={out}", f"grpo.seed={seed}",
                f"grpo.max_steps={steps}", f"grpo.save_steps={steps}", "grpo.learning_rate=0.0",
                "grpo.logging_steps=1", "grpo.report_to=none", "run.save_final=false", *overrides]
    identity = run_identity(model, shards, profile_dir, settings)
    record = out / "bench_run.json"
    if record.is_file() and (got := json.loads(record.read_text()))["identity"] == identity:
        return got["run"]
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    result = train(compose_train_config(recipe, settings))
    run = {"seconds": round(time.perf_counter() - t, 2), "steps": result.global_step,
           "load_average": round(os.getloadavg()[0], 2), "informative": result.informative}
    write_json(record, {"identity": identity, "run": run})
    return run


def prediction(out: Path, *, arms: list[str], steps: int, prompts: int, K: int, rows: int | None, samples: int,
               recipe: str, seed: int, warm_from: Path | None, warm_rows: int, warm_epochs: float,
               overrides: list[str], dataset: str = "musique", path: Path = TRAIN) -> dict:
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    out.mkdir(parents=True, exist_ok=True)
    rows = rows or steps * prompts
    t0 = time.perf_counter()
    model = warm_from or warm(out, rows=rows, warm_rows=warm_rows, epochs=warm_epochs)
    t = time.perf_counter()
    prof = make_profile(out, model, rows=rows, K=K, samples=samples, recipe=recipe, seed=seed, dataset=dataset,
                        path=path)
    t_profile = time.perf_counter() - t
    builds = {a: build(out / f"train-{a.replace(' ', '-')}", path, rows, K, schedule=ARMS[a][0], order=ARMS[a][1],
                       profile=prof, dataset=dataset, **BUILD_EXTRA.get(a, {})) for a in arms}
    per_arm = {}
    for a in arms:
        r = train_arm(model, builds[a], prof, out / "runs" / a.replace(" ", "-"), recipe=recipe, steps=steps,
                      rows=rows, seed=seed,
                      overrides=[f"batch.prompts_per_step={prompts}", *TRAIN_EXTRA.get(a, []), *overrides])
        r["unbiased"] = unbiased_check(prof, out / "runs" / a.replace(" ", "-"), r["informative"]["group_size"])
        per_arm[a] = r
        w = r["informative"]["whole"]
        print(f"bench arm {a}: measured {w['measured']:.3f}, predicted {w['predicted']:.3f} "
              f"{w['predicted_interval']} over {w['groups']} groups: {'inside' if w['inside'] else 'OUTSIDE'} "
              f"({r['seconds']:.0f} s, load {r['load_average']}); unbiased estimate {r['unbiased']['whole']['predicted']:.3f} "
              f"{r['unbiased']['whole']['predicted_interval']}", flush=True)
    summary = {
        "kind": "prediction-bench",
        "settings": {"arms": arms, "steps": steps, "prompts": prompts, "K": K, "rows": rows, "samples": samples,
                     "recipe": recipe, "seed": seed, "lr": 0.0, "dataset": dataset, "input": str(path), "warm_from": str(warm_from or ""),
                     "overrides": overrides},
        "profile": {"path": str(prof), "per_level": json.loads((prof / "profile.json").read_text()).get("per_level")},
        "arms": per_arm,
        "pooled": pooled(per_arm, out),
        "seconds": {"profile": round(t_profile, 1), "train": round(sum(r["seconds"] for r in per_arm.values()), 1),
                    "total": round(time.perf_counter() - t0, 1)},
        "load_average": round(os.getloadavg()[0], 2),
    }
    write_json(out / "summary.json", summary)
    return summary


def report(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    s = summary["settings"]
    table = Table(title=f"learning rate 0: {s['steps']} steps x {s['prompts']} prompts, recipe {s['recipe']}, "
                        f"profile of {s['samples']} samples", title_justify="left")
    for col in ("arm", "level", "groups", "predicted [95% binomial]", "measured [Wilson 95%]", "error [bootstrap]",
                "inside", "unbiased estimate [95%]", "inside"):
        table.add_column(col, justify="right")
    for a, r in summary["arms"].items():
        info, unb = r["informative"], r["unbiased"]
        for name, c in [("all", info["whole"]), *info["per_level"].items()]:
            lo, hi = c["predicted_interval"]
            mlo, mhi = c["measured_interval"]
            elo, ehi = c["error_interval"]
            u = unb["whole"] if name == "all" else unb["per_level"][name]
            ulo, uhi = u["predicted_interval"]
            table.add_row(a if name == "all" else "", str(name), str(c["groups"]),
                          f"{c['predicted']:.3f} [{lo:.3f}, {hi:.3f}]", f"{c['measured']:.3f} [{mlo:.3f}, {mhi:.3f}]",
                          f"{c['error']:+.3f} [{elo:+.3f}, {ehi:+.3f}]", "yes" if c["inside"] else "NO",
                          f"{u['predicted']:.3f} [{ulo:.3f}, {uhi:.3f}]", "yes" if u["inside"] else "NO")
    Console(width=150).print(table)
    for name, c in summary["pooled"].items():
        print(f"every arm, {name}: predicted {c['predicted']:.3f} {c['predicted_interval']}, measured "
              f"{c['measured']:.3f} over {c['groups']} groups: {'inside' if c['inside'] else 'OUTSIDE'}")
    sec = summary["seconds"]
    print(f"profile {sec['profile']:.0f} s, training {sec['train']:.0f} s, total {sec['total']:.0f} s at load "
          f"average {summary['load_average']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default=",".join(CHECKED), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--rows", type=int, default=None, help="training questions [default: steps x prompts]")
    ap.add_argument("--K", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8, help="profile samples per question and level")
    ap.add_argument("--recipe", default="cpu-learn", help="the train recipe: reward, sampling, G")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm-rows", type=int, default=8)
    ap.add_argument("--warm-epochs", type=float, default=20.0)
    ap.add_argument("--warm-from", type=Path, default=None, help="a warm-started model folder to start from instead")
    ap.add_argument("--dataset", default="musique", help="the training questions' dataset (with --input)")
    ap.add_argument("--input", type=Path, default=TRAIN, help="its file [default: the shared MuSiQue sample]")
    ap.add_argument("--override", action="append", default=[], help="more train overrides (key=value)")
    ap.add_argument("--quick", action="store_true", help="2 arms (max, min-max), 4 steps, 8 rows, 4 samples")
    ap.add_argument("--out", type=Path, default=Path("outputs/prediction"))
    a = ap.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    if a.quick:
        arms, a.steps, a.rows, a.samples, a.warm_epochs = ["max", "min-max"], 4, 8, 4, 5.0
    summary = prediction(a.out, arms=arms, steps=a.steps, prompts=a.prompts, K=a.K, rows=a.rows, samples=a.samples,
                         recipe=a.recipe, seed=a.seed, warm_from=a.warm_from, warm_rows=a.warm_rows,
                         warm_epochs=a.warm_epochs, overrides=a.override, dataset=a.dataset,
                         path=a.input)
    report(summary)
    print(f"wrote {a.out / 'summary.json'}")


if __name__ == "__main__":
    main()
