"""Does a curriculum change what a model learns where the level profile says it should? A pre-registered test.

GRPO learns from a group of G samples only when their training rewards differ (an *informative* group). The level
profile (``curriculum profile``, scored with the reward that trains) predicts, before any training, what share of
each schedule's groups will be informative (``curriculum build --profile``). This bench runs the comparison that
prediction makes possible, as a pre-registration file (``--prereg``, committed before any training run) fixes it:

1. **the testbed**: the tiny model of docs/learning.md made here and warm-started (``curriculum warm-start``) on
   the training questions at level 1, then profiled (``curriculum profile``'s library function) at every level
   1..K, the samples scored by each setting's reward (generated once, rescored for the others);
2. **the arms** of each setting (a reward): each schedule built from the same questions with ``--profile``; its
   predicted informative fraction, whole and per quarter of the steps, recomputed here from the profile and the
   build's rows and refused when it differs from the pre-registered one;
3. **the runs**: each arm trained with TRL's GRPOTrainer (``recipe=cpu-learn`` with the pre-registration's
   learning rate, KL, G, batch and steps) once per seed, and a learning-rate-0 control (the reference arm) per
   setting: per quarter of the steps the measured informative fraction (TRL's ``1 - frac_reward_zero_std``) beside
   the prediction, and the policy's entropy (TRL's ``entropy``);
4. **the reading**: the primary metric (exact match at the top level on the training questions, sampled as
   trained) of every model and of the start, each arm's paired difference against the reference arm (seed by
   seed), with a percentile bootstrap 95% interval over the seeds (every resample enumerated: bench/_effect_stats.py),
   and the verdict against the pre-registered direction and smallest effect of interest; the secondary metrics
   (fresh contexts: the same questions at level K with other distractors and order; the mean over levels; held-out
   questions) beside it.

Writes ``summary.json`` (the pre-registration and its commit, inputs' digests, every run's per-step figures, per-arm
figures with intervals, the verdicts), ``effect.png`` and ``predictions.json`` into ``--out``; a finished run
there is reused when its start, rows and settings are the same. No timed assertion.

    python bench/bench_curriculum_effect.py --predict --out outputs/effect   # the testbed and its predictions only
    python bench/bench_curriculum_effect.py --out outputs/effect             # every run of the pre-registration
    python bench/bench_curriculum_effect.py --quick --out outputs/effect-quick   # a look: 1 seed, 8 steps
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import ROOT  # noqa: E402
from _effect_stats import paired_bootstrap, verdict  # noqa: E402
from bench_mechanism import predicted_per_step  # noqa: E402
from bench_prediction import run_identity  # noqa: E402
from bench_real_learning import SHARED, build_digest, weights_digest, write_json  # noqa: E402

PREREG = HERE / "preregistered" / "curriculum_effect.yaml"
#: what a pre-registration must say (the bench refuses one without)
REQUIRED = {"testbed": ("dataset", "input", "questions", "K", "levels", "warm_start", "profile"),
            "training": ("recipe", "steps", "prompts", "generations", "learning_rate", "beta",
                         "max_completion_length", "control_seeds"),
            "evaluation": ("primary", "samples", "temperature", "held_out_input", "held_out_questions")}
#: the predicted figures are compared with the ones recomputed from the profile to this many decimals
TOLERANCE = 5e-4
QUARTERS = 4


class PreregistrationError(SystemExit):
    """A pre-registration that is incomplete, uncommitted or contradicted by what the bench recomputes."""


# -- the pre-registration --------------------------------------------------------------------------------------------

def read_preregistration(path: Path) -> dict:
    """The pre-registration's YAML, checked for what the bench needs: the testbed, the training, the evaluation and
    at least one setting, each with a reward, a reference arm among its arms, every arm's schedule and predicted
    informative fraction, and what is expected of each comparison."""
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise PreregistrationError(f"{path}: cannot read the pre-registration: {e}") from e
    if not isinstance(doc, dict):
        raise PreregistrationError(f"{path}: not a mapping")
    missing = [f"{part}.{key}" for part, keys in REQUIRED.items() for key in keys
               if key not in (doc.get(part) or {})]
    if "seeds" not in doc:
        missing.append("seeds")
    if not doc.get("settings"):
        missing.append("settings")
    if missing:
        raise PreregistrationError(f"{path}: the pre-registration does not say {', '.join(missing)}")
    for name, s in doc["settings"].items():
        for key in ("reward", "reference", "arms", "expect", "smallest_effect"):
            if key not in s:
                raise PreregistrationError(f"{path}: settings.{name} does not say {key}")
        if s["reference"] not in s["arms"]:
            raise PreregistrationError(f"{path}: settings.{name}.reference {s['reference']!r} is not one of its arms "
                                       f"({', '.join(s['arms'])})")
        if s["expect"] == "auto":
            if "min_predicted_gap" not in s:
                raise PreregistrationError(f"{path}: settings.{name}.expect is auto: say min_predicted_gap (the "
                                           "predicted gap in informative fraction from which an effect is expected)")
            continue  # the arms' predictions and expectations come from the profile by that rule (resolve_rules)
        for arm, a in s["arms"].items():
            for key in ("schedule", "predicted"):
                if key not in a:
                    raise PreregistrationError(f"{path}: settings.{name}.arms.{arm} does not say {key}")
            if arm != s["reference"] and arm not in s["expect"]:
                raise PreregistrationError(f"{path}: settings.{name}.expect does not say what is expected of {arm} "
                                           f"against {s['reference']} (+1, -1 or 0)")
        bad = {a: e for a, e in s["expect"].items() if e not in (-1, 0, 1)}
        if bad:
            raise PreregistrationError(f"{path}: settings.{name}.expect: {bad}: each must be +1, -1 or 0")
    return doc


def preregistration_commit(path: Path) -> str:
    """The commit that last changed the pre-registration, refused when the file is not committed as it stands (the
    results must cite the text the runs followed)."""
    rel = Path(path).resolve().relative_to(ROOT)
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False).stdout
    if git("status", "--porcelain", "--", str(rel)).strip() or not git("ls-files", "--", str(rel)).strip():
        raise PreregistrationError(f"{rel}: commit the pre-registration before any training run (the results cite "
                                   "its commit); --predict and --quick run without one")
    return git("log", "-1", "--format=%H", "--", str(rel)).strip()


# -- the testbed -----------------------------------------------------------------------------------------------------

def source(doc: dict, key: str = "input") -> Path:
    return SHARED / doc["testbed"][key] if key == "input" else SHARED / doc["evaluation"][key]


def build(out: Path, path: Path, n: int, K: int, *, dataset: str, schedule: str = "max", order: str = "level",
          profile: Path | None = None, seed: int = 0, held_out: bool = False, **extra: object) -> Path:
    """A ``curriculum build`` into ``out`` (kept when there)."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if not (out / "manifest.json").is_file():
        build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(path), n=n, K=K)], schedule=schedule,
                                     order=order, out=str(out), seed=seed, allow_split_mismatch=held_out,
                                     profile=str(profile) if profile else None, **extra), command="bench")
    return out


def warm(out: Path, doc: dict) -> Path:
    """The tiny model warm-started on the training questions at level 1 (``testbed.warm_start``)."""
    from rag_curriculum.train import WarmStartConfig, warm_start

    t, w = doc["testbed"], doc["testbed"]["warm_start"]
    folder = out / "warm"
    card = folder / "warm_start.json"
    if card.is_file():
        was = json.loads(card.read_text())["settings"]
        if any(was.get(k) != v for k, v in w.items()):
            raise SystemExit(f"{folder}: a warm start with other settings than {w}: give another --out")
        return folder
    rows = build(out / "warm-rows", source(doc), t["questions"], 1, dataset=t["dataset"])
    r = warm_start(WarmStartConfig(shards=str(rows), out=str(folder), **w))
    print(f"warm start: {r.examples} examples, loss {r.loss_first:.3f} -> {r.loss_last:.3f}, {r.seconds:.0f} s",
          flush=True)
    return folder


def reward_spec(setting: dict) -> str:
    """A setting's reward as ``--reward`` takes it (``name[:weight],...``)."""
    r = setting["reward"]
    return r if isinstance(r, str) else ",".join(f"{e['name']}:{e.get('weight', 1.0)}" for e in r)


def reward_override(setting: dict) -> str:
    """A setting's reward as a training override of ``rewards``."""
    entries = [e.split(":") for e in reward_spec(setting).split(",")]
    return "rewards=[" + ",".join(f"{{name:{e[0]},weight:{e[1] if len(e) > 1 else 1.0}}}" for e in entries) + "]"


def profiles(out: Path, model: Path, doc: dict) -> dict[str, Path]:
    """One profile per setting: the samples generated once (the first setting's folder), the others copies rescored
    with their reward (``curriculum profile`` rescores a folder's samples without generating)."""
    from rag_curriculum.partition import ProfileConfig, profile

    t, tr = doc["testbed"], doc["training"]
    record, start = out / "profile_start.json", {"start": weights_digest(str(model)), "testbed": t,
                                                 "training": {k: tr[k] for k in ("recipe", "generations",
                                                                                 "max_completion_length")}}
    if record.is_file() and json.loads(record.read_text()) != start:
        raise SystemExit(f"{out}: profiles of other weights or settings: give another --out")
    write_json(record, start)
    folders: dict[str, Path] = {}
    first: Path | None = None
    for name, s in doc["settings"].items():
        folder = out / f"profile-{name}"
        if first is not None and not (folder / "profile.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(first, folder)
        res = profile(ProfileConfig(dataset=t["dataset"], input=str(source(doc)), n=t["questions"], K=t["K"],
                                    levels=",".join(str(v) for v in t["levels"]), out=str(folder),
                                    backend="transformers", model=str(model), samples=t["profile"]["samples"],
                                    recipe=tr["recipe"], reward=reward_spec(s), seed=t["profile"].get("seed", 0),
                                    max_tokens=tr["max_completion_length"], group_size=tr["generations"]),
                      command="bench")
        if not res.complete:
            raise SystemExit(f"{folder}: the profile stopped before the end; run again to finish it")
        folders[name] = folder
        first = first or folder
    return folders


def quarters(values: list[float], n: int = QUARTERS) -> list[float]:
    """The means of ``values`` over ``n`` consecutive spans of (nearly) equal length.

    >>> quarters([1, 1, 0, 0, 1, 0, 1, 1])
    [1.0, 0.0, 0.5, 1.0]
    """
    k = -(-len(values) // n)
    return [round(statistics.mean(values[i:i + k]), 6) for i in range(0, len(values), k)]


def arm_builds(out: Path, doc: dict, profile_dirs: dict[str, Path]) -> dict[str, dict[str, Path]]:
    """Each setting's arms built from the training questions with its profile."""
    t = doc["testbed"]
    builds: dict[str, dict[str, Path]] = {}
    for name, s in doc["settings"].items():
        builds[name] = {}
        for arm, a in s["arms"].items():
            extra = {k: v for k, v in a.items() if k not in ("schedule", "predicted", "quarters", "order")}
            builds[name][arm] = build(out / f"train-{name}-{arm}", source(doc), t["questions"], t["K"],
                                      dataset=t["dataset"], schedule=a["schedule"], order=a.get("order", "level"),
                                      profile=profile_dirs[name], group_size=doc["training"]["generations"], **extra)
    return builds


def predictions(doc: dict, builds: dict[str, dict[str, Path]], profile_dirs: dict[str, Path]) -> dict:
    """Per setting and arm: the build's predicted informative fraction (the card's figure), the same per step of
    the run and per quarter of the steps, the mean level and the level profile it came from."""
    from rag_curriculum.shards import read_rows

    tr = doc["training"]
    out: dict = {}
    for name, arms in builds.items():
        per_level = json.loads((profile_dirs[name] / "profile.json").read_text())["per_level"]
        out[name] = {"per_level": {lv: {"informative": v["informative"], "pass_rate": v["pass_rate"]}
                                   for lv, v in per_level.items()}, "arms": {}}
        for arm, shards in arms.items():
            card = json.loads((shards / "manifest.json").read_text())["profile"]["this_build"]
            per_step = predicted_per_step(shards, profile_dirs[name], steps=tr["steps"], prompts=tr["prompts"],
                                          group_size=tr["generations"])
            levels = [int(r["level"]) for r in read_rows(shards)]
            out[name]["arms"][arm] = {"whole": card["whole"], "run": round(statistics.mean(per_step), 4),
                                      "quarters": [round(q, 4) for q in quarters(per_step)],
                                      "per_step": per_step, "mean_level": round(statistics.mean(levels), 3)}
    return out


def resolve_rules(doc: dict, predicted: dict) -> dict:
    """A setting pre-registered by rule (``expect: auto``, as on a machine where the profile and the runs must
    happen in one session) gets its arms' predictions from the profile and, per arm, the expectation the rule
    gives: the sign of its predicted gap to the reference arm when that gap is at least ``min_predicted_gap``, else
    no difference. The rule is fixed before the runs; ``predictions.json`` records what it gave before training."""
    import copy

    d = copy.deepcopy(doc)
    for name, s in d["settings"].items():
        if s["expect"] != "auto":
            continue
        ref = predicted[name]["arms"][s["reference"]]["run"]
        s["expect"] = {}
        for arm, a in s["arms"].items():
            a["predicted"] = predicted[name]["arms"][arm]["run"]
            if arm != s["reference"]:
                gap = a["predicted"] - ref
                s["expect"][arm] = (1 if gap > 0 else -1) if abs(gap) >= float(s["min_predicted_gap"]) else 0
    return d


def check_predictions(doc: dict, predicted: dict) -> list[str]:
    """Where the pre-registered predictions differ from the ones recomputed from the profile (empty: none)."""
    wrong = []
    for name, s in doc["settings"].items():
        for arm, a in s["arms"].items():
            got = predicted[name]["arms"][arm]["run"]
            if abs(float(a["predicted"]) - got) > TOLERANCE:
                wrong.append(f"settings.{name}.arms.{arm}.predicted: {a['predicted']} pre-registered, {got} from "
                             "the profile")
            if "quarters" in a:
                want = [float(x) for x in a["quarters"]]
                have = predicted[name]["arms"][arm]["quarters"]
                if len(want) != len(have) or any(abs(x - y) > TOLERANCE for x, y in zip(want, have, strict=False)):
                    wrong.append(f"settings.{name}.arms.{arm}.quarters: {want} pre-registered, {have} from the "
                                 "profile")
    return wrong


# -- runs and evaluation ---------------------------------------------------------------------------------------------

def train_run(model: Path, shards: Path, out: Path, *, doc: dict, setting: dict, seed: int, lr: float,
              profile_dir: Path) -> dict:
    """One GRPO run (``training.recipe`` with the pre-registration's settings and the setting's reward); its
    per-step figures from TRL's log (informative, entropy, reward) and the trainer's check of the profile,
    reused when done from the same inputs."""
    from rag_curriculum.train import compose_train_config, train

    tr = doc["training"]
    batch = tr["prompts"] * tr["generations"]
    settings = [f"model.name_or_path={model}", f"data.shards={shards}", f"data.max_rows={doc['testbed']['questions']}",
                f"run.output_dir={out}", f"grpo.seed={seed}", f"grpo.max_steps={tr['steps']}",
                f"grpo.save_steps={tr['steps']}", f"batch.prompts_per_step={tr['prompts']}",
                f"grpo.num_generations={tr['generations']}", f"batch.per_device_completions={batch}",
                f"grpo.max_completion_length={tr['max_completion_length']}", f"grpo.learning_rate={lr}",
                f"grpo.beta={tr['beta']}", f"data.profile={profile_dir}", "grpo.logging_steps=1",
                "run.save_final=true", reward_override(setting), *tr.get("overrides", [])]
    identity = run_identity(model, shards, profile_dir, settings)
    record = out / "bench_run.json"
    if record.is_file() and (got := json.loads(record.read_text()))["identity"] == identity:
        return got["run"]
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    result = train(compose_train_config(tr["recipe"], settings))
    seconds = time.perf_counter() - t
    steps = [h for h in result.log_history if "frac_reward_zero_std" in h]
    run = {"seconds": round(seconds, 2), "steps": len(steps),
           "informative": [round(1.0 - float(h["frac_reward_zero_std"]), 6) for h in steps],
           "entropy": [round(float(h["entropy"]), 6) for h in steps if "entropy" in h],
           "reward": [round(float(h["reward"]), 6) for h in steps], "check": result.informative,
           "load_average": round(os.getloadavg()[0], 2)}
    write_json(record, {"identity": identity, "run": run})
    return run


#: prompts per generation batch when scoring (the completions depend on it: the seeding is per batch)
EVAL_BATCH = 16


def exact_match_at(backend: object, rows: list[dict], *, samples: int, temperature: float, seed: int,
                   max_tokens: int) -> dict:
    """``rows`` answered by ``backend`` (the transformers backend, :data:`EVAL_BATCH` prompts a batch) ``samples``
    times each at ``temperature`` (seeded per question: the start and every arm draw alike), scored by the RAG-RL
    answer term (exact match against the answer or an alias, from the parsed final answer, as the reward the answer
    setting trains on): per question, then the mean over questions; also the mean RAG-RL total."""
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.rewards import RagRlReward

    sampling = SamplingConfig(n=samples, temperature=temperature, top_p=1.0, max_tokens=max_tokens, seed=seed)
    outs = backend.generate([r["prompt"] for r in rows], sampling,  # type: ignore[attr-defined]
                            seeds=[seed * 100_003 + i for i in range(len(rows))])
    reward = RagRlReward()
    em, total = [], []
    for row, completions in zip(rows, outs, strict=True):
        labels = [p["label"] for p in row["passages"]]
        scores = [reward.score(c, answers=row["answers"], gold_labels=row["gold_labels"], labels=labels)
                  for c in completions]
        em.append(statistics.mean(s.answer / reward.gamma_answer for s in scores))
        total.append(statistics.mean(s.total for s in scores))
    return {"exact_match": round(statistics.mean(em), 6), "reward": round(statistics.mean(total), 6),
            "per_question": [round(x, 6) for x in em]}


def eval_sets(out: Path, doc: dict) -> dict[str, list[dict]]:
    """The evaluation rows, each a build of ``testbed.questions`` training questions: ``top`` at level K as the max
    arm trains them (the primary metric's), ``fresh`` the same at level K with other distractors and order (build
    seed 1), ``level L`` at each of ``evaluation.levels`` (a build with K = L: a row's passages depend on its question
    and level alone, so these are the rows every schedule trains at L), and ``held_out`` questions at level K."""
    from rag_curriculum.shards import read_rows

    t, e = doc["testbed"], doc["evaluation"]

    def rows(name: str, path: Path, n: int, K: int, **kw: object) -> list[dict]:
        return read_rows(build(out / f"eval-{name}", path, n, K, dataset=t["dataset"], **kw))

    sets = {"top": rows("top", source(doc), t["questions"], t["K"])}
    if e.get("only_primary"):  # a pilot's
        return sets
    sets["fresh"] = rows("fresh", source(doc), t["questions"], t["K"], seed=1)
    for lv in e.get("levels", []):
        sets[f"level {lv}"] = rows(f"level{lv}", source(doc), t["questions"], int(lv))
    sets["held_out"] = rows("held-out", source(doc, "held_out_input"), e["held_out_questions"], t["K"],
                            held_out=True)
    return sets


def evaluate_model(model: Path, sets: dict[str, list[dict]], doc: dict, *, seed: int, cache: Path) -> dict:
    """Every evaluation set's exact match for one model and sampling seed (``evaluation.samples`` for the primary
    set, ``secondary_samples`` for the others), cached beside the run by the model's weights."""
    e = doc["evaluation"]
    identity = {"weights": weights_digest(str(model)), "seed": seed, "evaluation": e,
                "sets": {k: [r["id"] for r in v] for k, v in sets.items()}}
    if cache.is_file() and (got := json.loads(cache.read_text()))["identity"] == identity:
        return got["scores"]
    from rag_curriculum.generation import get_backend

    scores = {}
    backend = get_backend("transformers", model=str(model), batch_size=EVAL_BATCH)  # loaded once for every set
    try:
        for name, rows in sets.items():
            samples = e["samples"] if name == e["primary"] else e.get("secondary_samples", e["samples"])
            scores[name] = exact_match_at(backend, rows, samples=samples, temperature=e["temperature"],
                                          seed=10_000 + seed, max_tokens=doc["training"]["max_completion_length"])
    finally:
        backend.close()
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_json(cache, {"identity": identity, "scores": scores})
    return scores


# -- the reading -----------------------------------------------------------------------------------------------------

def arm_figures(runs: list[dict], seeds: list[int], metric: str, start: dict[int, dict]) -> dict:
    """An arm's figures over its seeds: the measured informative fraction (whole and per quarter), the entropy per
    quarter, and each evaluation set's exact match with its interval and its gain over the start."""
    mine = {r["seed"]: r for r in runs}
    entry = {"informative": paired_bootstrap([statistics.mean(mine[s]["informative"]) for s in seeds]),
             "informative_quarters": [round(statistics.mean(q), 6) for q in
                                      zip(*(quarters(mine[s]["informative"]) for s in seeds), strict=True)],
             "entropy_quarters": ([round(statistics.mean(q), 6) for q in
                                   zip(*(quarters(mine[s]["entropy"]) for s in seeds), strict=True)]
                                  if all(mine[s]["entropy"] for s in seeds) else None),
             "eval": {}}
    for name in mine[seeds[0]]["eval"]:
        entry["eval"][name] = {
            "exact_match": paired_bootstrap([mine[s]["eval"][name]["exact_match"] for s in seeds]),
            "vs_start": paired_bootstrap([mine[s]["eval"][name]["exact_match"] - start[s][name]["exact_match"]
                                          for s in seeds])}
    return entry


def read_setting(doc: dict, name: str, runs: list[dict], start: dict[int, dict], predicted: dict) -> dict:
    """One setting's reading: per arm its figures beside its prediction; per pre-registered comparison the paired
    difference in the primary metric and in the measured informative fraction, and the verdict."""
    s, e = doc["settings"][name], doc["evaluation"]
    seeds = sorted({r["seed"] for r in runs if r["arm"] in s["arms"]})
    primary = e["primary"]
    arms = {}
    for arm in s["arms"]:
        arms[arm] = {"predicted": {k: predicted["arms"][arm][k] for k in ("whole", "run", "quarters", "mean_level")},
                     **arm_figures([r for r in runs if r["arm"] == arm], seeds, primary, start)}
    control = [r for r in runs if r["arm"] == "control"]
    out = {"reward": reward_spec(s), "reference": s["reference"], "seeds": seeds, "arms": arms, "comparisons": {}}
    if control:
        cs = sorted(r["seed"] for r in control)
        out["control"] = {"seeds": cs, "learning_rate": doc["training"].get("control_learning_rate", 0.0),
                          **arm_figures(control, cs, primary, start),
                          "predicted": {k: predicted["arms"][s["reference"]][k] for k in ("run", "quarters")}}
    ref = {r["seed"]: r for r in runs if r["arm"] == s["reference"]}
    for arm, expect in s["expect"].items():
        mine = {r["seed"]: r for r in runs if r["arm"] == arm}
        diff = paired_bootstrap([mine[x]["eval"][primary]["exact_match"] - ref[x]["eval"][primary]["exact_match"]
                                 for x in seeds])
        informative = paired_bootstrap([statistics.mean(mine[x]["informative"]) - statistics.mean(ref[x]["informative"])
                                        for x in seeds])
        secondary = {k: paired_bootstrap([mine[x]["eval"][k]["exact_match"] - ref[x]["eval"][k]["exact_match"]
                                          for x in seeds])
                     for k in mine[seeds[0]]["eval"] if k != primary}
        predicted_gap = round(predicted["arms"][arm]["run"] - predicted["arms"][s["reference"]]["run"], 4)
        out["comparisons"][arm] = {"against": s["reference"], "primary": diff, "informative": informative,
                                   "predicted_informative": predicted_gap, "secondary": secondary,
                                   **verdict(diff, expect=int(expect), smallest_effect=float(s["smallest_effect"]))}
    return out


def check_runs(doc: dict, runs: list[dict]) -> list[str]:
    """Where the runs depart from the pre-registration (empty: none): a setting, arm or seed missing or extra, a run
    of another length or learning rate."""
    tr = doc["training"]
    want = {(name, arm, seed, float(tr["learning_rate"])) for name, s in doc["settings"].items()
            for arm in s["arms"] for seed in doc["seeds"]}
    want |= {(name, "control", seed, float(tr.get("control_learning_rate", 0.0))) for name in doc["settings"]
             for seed in tr["control_seeds"]}
    have = {(r["setting"], r["arm"], r["seed"], float(r["learning_rate"])) for r in runs}
    wrong = [f"no run of {k[0]}, {k[1]}, seed {k[2]} at learning rate {k[3]:g}" for k in sorted(want - have)]
    wrong += [f"a run not pre-registered: {k[0]}, {k[1]}, seed {k[2]} at learning rate {k[3]:g}"
              for k in sorted(have - want)]
    wrong += [f"{r['setting']}, {r['arm']}, seed {r['seed']}: {r['steps']} steps, not {tr['steps']}"
              for r in runs if r["steps"] != tr["steps"]]
    return wrong


def follows(comparison: dict) -> str:
    """Whether learning followed the informative difference in one comparison, in words."""
    lo, hi = comparison["informative"]["ci"]
    inf = "more" if lo > 0 else "fewer" if hi < 0 else "no different share of"
    plo, phi = comparison["primary"]["ci"]
    learnt = "more" if plo > 0 else "less" if phi < 0 else "no measurably different amount"
    agree = (lo > 0 and plo > 0) or (hi < 0 and phi < 0) or (lo <= 0 <= hi and plo <= 0 <= phi)
    return f"{inf} informative groups, {learnt} learnt: {'follows' if agree else 'does not follow'}"


def cpu_seconds() -> float:
    """CPU time of this process and its finished children, user and system."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def experiment(out: Path, doc: dict, *, predict_only: bool = False, commit: str | None = None,
               runs_dir: Path | None = None) -> dict:
    """The testbed, the predictions (checked against the pre-registration), the runs and the reading; the summary
    (also ``summary.json`` in ``runs_dir``, default ``out``: a pilot's runs and reading apart from the registered
    ones, on the same testbed)."""
    out.mkdir(parents=True, exist_ok=True)
    runs_dir = runs_dir or out
    registered = doc
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    model = warm(out, doc)
    t_warm = time.perf_counter() - t0
    t = time.perf_counter()
    profile_dirs = profiles(out, model, doc)
    t_profile = time.perf_counter() - t
    builds = arm_builds(out, doc, profile_dirs)
    predicted = {name: predictions(doc, {name: builds[name]}, profile_dirs)[name] for name in builds}
    write_json(out / "predictions.json", predicted)
    if predict_only:
        return {"predictions": predicted}
    doc = resolve_rules(doc, predicted)
    if doc["training"]["learning_rate"] is None:
        raise PreregistrationError("training.learning_rate is not set: fix it (by the pre-registration's rule) and "
                                   "commit before training")
    wrong = check_predictions(doc, predicted)
    if wrong:
        raise PreregistrationError("the pre-registered predictions are not the profile's:\n  " + "\n  ".join(wrong))
    tr, seeds = doc["training"], list(doc["seeds"])
    sets = eval_sets(out, doc)
    start = {s: evaluate_model(model, sets, doc, seed=s, cache=out / "start" / f"eval-seed{s}.json") for s in seeds}
    runs: list[dict] = []
    for name, s in doc["settings"].items():
        jobs = [(arm, seed, tr["learning_rate"]) for seed in seeds for arm in s["arms"]]
        jobs += [("control", seed, tr.get("control_learning_rate", 0.0)) for seed in tr["control_seeds"]]
        for arm, seed, lr in jobs:
            shards = builds[name][s["reference"] if arm == "control" else arm]
            folder = runs_dir / "runs" / name / f"{arm}-seed{seed}"
            r = train_run(model, shards, folder, doc=doc, setting=s, seed=seed, lr=lr, profile_dir=profile_dirs[name])
            r["eval"] = evaluate_model(folder, sets, doc, seed=seed, cache=folder / "bench_eval.json")
            runs.append({"setting": name, "arm": arm, "seed": seed, "learning_rate": lr, **r})
            p = doc["evaluation"]["primary"]
            print(f"bench run: {name}, {arm}, seed {seed}: informative {statistics.mean(r['informative']):.3f} "
                  f"(predicted {predicted[name]['arms'][s['reference'] if arm == 'control' else arm]['run']:.3f}), "
                  f"{p} exact match {r['eval'][p]['exact_match']:.3f} (start {start[seed][p]['exact_match']:.3f}), "
                  f"{r['seconds']:.0f} s", flush=True)
    wrong = check_runs(doc, runs)
    if wrong:
        raise PreregistrationError("the runs depart from the pre-registration:\n  " + "\n  ".join(wrong))
    reading = {name: read_setting(doc, name, [r for r in runs if r["setting"] == name], start, predicted[name])
               for name in doc["settings"]}
    for setting in reading.values():
        for c in setting["comparisons"].values():
            c["follows"] = follows(c)
    train_seconds = [r["seconds"] for r in runs]
    summary = {
        "kind": "curriculum-effect-bench",
        "preregistration": {"commit": commit, "text": registered, **({"resolved": doc} if doc != registered else {})},
        "inputs": {"start": weights_digest(str(model)),
                   "train": {n: {a: build_digest(p) for a, p in arms.items()} for n, arms in builds.items()}},
        "predictions": predicted,
        "start": {str(s): v for s, v in start.items()},
        "settings": reading,
        "runs": runs,
        "seconds": {"warm_start": round(t_warm, 1), "profile": round(t_profile, 1),
                    "train_total": round(sum(train_seconds), 1), "total": round(time.perf_counter() - t0, 1),
                    "cpu": round(cpu_seconds() - cpu0, 1)},
        "load_average": round(os.getloadavg()[0], 2),
    }
    write_json(runs_dir / "summary.json", summary)
    plot(summary, runs_dir / "effect.png")
    return {**summary, "folder": str(runs_dir)}


def plot(summary: dict, path: Path) -> None:
    """Per setting: the measured informative fraction per quarter of the steps (mean over seeds) beside the
    prediction (dashed), and each arm's primary metric minus the reference arm's with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["#3b7dd8", "#d8663b", "#4a9a4a", "#9a4a9a", "#c8a13b"]
    names = list(summary["settings"])
    fig, axes = plt.subplots(len(names), 2, figsize=(10, 3.4 * len(names)), squeeze=False)
    primary = summary["preregistration"]["text"]["evaluation"]["primary"]
    for (ax, bx), name in zip(axes, names, strict=True):
        s = summary["settings"][name]
        for color, (arm, e) in zip(colors, s["arms"].items(), strict=False):
            xs = range(1, len(e["informative_quarters"]) + 1)
            ax.plot(xs, e["informative_quarters"], color=color, marker="o", label=f"{arm}")
            ax.plot(xs, e["predicted"]["quarters"][:len(xs)], color=color, ls="--", lw=1)
        if "control" in s:
            c = s["control"]
            ax.plot(range(1, len(c["informative_quarters"]) + 1), c["informative_quarters"], color="#777777",
                    marker="x", label="learning rate 0")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("quarter of the steps")
        ax.set_ylabel("informative groups")
        ax.set_title(f"{name} ({s['reward']}): measured (solid), predicted (dashed)", fontsize=9)
        ax.legend(fontsize=7)
        comps = list(s["comparisons"].items())
        for i, (arm, c) in enumerate(comps):
            d = c["primary"]
            bx.errorbar([i], [d["mean"]], yerr=[[d["mean"] - d["ci"][0]], [d["ci"][1] - d["mean"]]], marker="o",
                        capsize=4, color=colors[list(s["arms"]).index(arm) % len(colors)])
        bx.axhline(0, color="#999999", lw=1, ls="--")
        for m in (-1, 1):
            eff = summary["preregistration"]["text"]["settings"][name]["smallest_effect"]
            bx.axhline(m * eff, color="#cccccc", lw=1, ls=":")
        bx.set_xticks(range(len(comps)))
        bx.set_xticklabels([f"{a} - {c['against']}" for a, c in comps], fontsize=8)
        bx.set_xlim(-0.6, len(comps) - 0.4)
        bx.set_ylabel(f"exact match ({primary}), difference")
        bx.set_title(f"paired by seed, bootstrap 95% ({len(s['seeds'])} seeds); dotted: smallest effect", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    doc = summary["preregistration"]["text"]
    primary = doc["evaluation"]["primary"]
    for name, s in summary["settings"].items():
        table = Table(title=f"{name}: reward {s['reward']}, {len(s['seeds'])} seeds; exact match on '{primary}'",
                      title_justify="left")
        for col in ("arm", "informative predicted", "measured (95%)", "per quarter", "entropy per quarter",
                    "exact match (95%)", "minus start"):
            table.add_column(col, justify="right")
        rows = list(s["arms"].items()) + ([("lr 0", s["control"])] if "control" in s else [])
        for arm, e in rows:
            m, em = e["informative"], e["eval"][primary]
            table.add_row(arm, f"{e['predicted']['run']:.3f}", f"{m['mean']:.3f} [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]",
                          " ".join(f"{q:.2f}" for q in e["informative_quarters"]),
                          " ".join(f"{q:.2f}" for q in e["entropy_quarters"] or []),
                          f"{em['exact_match']['mean']:.3f} [{em['exact_match']['ci'][0]:.3f}, "
                          f"{em['exact_match']['ci'][1]:.3f}]", f"{em['vs_start']['mean']:+.3f}")
        console.print(table)
        for arm, c in s["comparisons"].items():
            d = c["primary"]
            extra = f", {c['seeds_needed']} seeds would decide it" if c.get("seeds_needed") else ""
            console.print(f"  {arm} - {c['against']}: {d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] "
                          f"(expected {c['expect']:+d}, smallest effect {c['smallest_effect']}): {c['outcome']}{extra}; "
                          f"{c['follows']}")
    sec = summary["seconds"]
    print(f"this invocation: warm start {sec['warm_start']:.0f} s, profiles {sec['profile']:.0f} s, total "
          f"{sec['total']:.0f} s ({sec['cpu']:.0f} s of CPU) at load average {summary['load_average']}; the runs' own "
          f"training time, reused ones included, {sec['train_total']:.0f} s. The warm start, profiles and finished "
          "runs are reused from --out when there")


def quick(doc: dict) -> dict:
    """The pre-registration cut to a look: its first setting's reference arm and one other, seed 0, 8 steps, 8
    questions, 2 samples; no interval means anything at this size."""
    import copy

    d = copy.deepcopy(doc)
    name = next(iter(d["settings"]))
    s = d["settings"][name]
    keep = [s["reference"], next(a for a in s["arms"] if a != s["reference"])]
    s["arms"] = {a: s["arms"][a] for a in keep}
    s["expect"] = {a: e for a, e in s["expect"].items() if a in keep}
    d["settings"] = {name: s}
    d["seeds"], d["training"]["control_seeds"], d["training"]["steps"] = [0], [], 8
    d["testbed"]["questions"] = 8
    d["testbed"]["warm_start"] = {**d["testbed"]["warm_start"], "rows": 8, "epochs": 5}
    d["testbed"]["profile"] = {**d["testbed"]["profile"], "samples": 4}
    d["evaluation"] = {**d["evaluation"], "samples": 2, "secondary_samples": 2, "held_out_questions": 4}
    return d


def pilot(doc: dict, learning_rate: float, beta: float) -> dict:
    """The pre-registration's testbed and arms at another learning rate and KL, seed 100 (outside the registered
    seeds), no control, scored on the primary set alone: the measurements a learning rate and KL are chosen from
    before registering them."""
    import copy

    d = copy.deepcopy(doc)
    d["seeds"], d["training"]["control_seeds"] = [100], []
    d["training"]["learning_rate"], d["training"]["beta"] = learning_rate, beta
    d["evaluation"]["only_primary"] = True
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prereg", type=Path, default=PREREG, help="the pre-registration (YAML) [default: %(default)s]")
    ap.add_argument("--out", type=Path, default=Path("outputs/curriculum-effect"))
    ap.add_argument("--predict", action="store_true", help="make the testbed and print each arm's predicted "
                    "informative fraction (what a pre-registration states); no training")
    ap.add_argument("--quick", action="store_true", help="a look: the first setting's reference and one other arm, "
                    "seed 0, 8 steps, 8 questions; the predictions are not checked and nothing is concluded")
    ap.add_argument("--pilot", metavar="LR[,BETA]", default=None, help="every arm once (seed 100) at this learning "
                    "rate and KL, into OUT/pilot-*: the measurements the registered ones are chosen from")
    a = ap.parse_args()
    doc = read_preregistration(a.prereg)
    if a.predict:
        got = experiment(a.out, doc, predict_only=True)["predictions"]
        for name, p in got.items():
            print(f"{name}: per level {p['per_level']}")
            for arm, v in p["arms"].items():
                print(f"  {arm}: predicted {v['run']} (card {v['whole']}), quarters {v['quarters']}, "
                      f"mean level {v['mean_level']}")
        return
    if a.pilot:
        lr, _, beta = a.pilot.partition(",")
        summary = unregistered_run(a.out, pilot(doc, float(lr), float(beta or 0.0)),
                                   runs=a.out / f"pilot-lr{float(lr):g}-beta{float(beta or 0.0):g}")
    elif a.quick:
        summary = unregistered_run(a.out, quick(doc))
    else:
        commit = preregistration_commit(a.prereg)
        summary = experiment(a.out, doc, commit=commit)
    report(summary)
    print(f"wrote the summary and effect.png into {summary['folder']}")


def unregistered_run(out: Path, doc: dict, runs: Path | None = None) -> dict:
    """A quick look or a pilot: the pre-registered predictions replaced by the ones recomputed for this testbed,
    the runs and the reading written into ``runs`` (default ``out``)."""
    experiment(out, doc, predict_only=True)
    predicted = json.loads((out / "predictions.json").read_text())
    for name, s in doc["settings"].items():
        for arm, a in s["arms"].items():
            a["predicted"] = predicted[name]["arms"][arm]["run"]
            a.pop("quarters", None)
    return experiment(out, doc, runs_dir=runs)


if __name__ == "__main__":
    main()
