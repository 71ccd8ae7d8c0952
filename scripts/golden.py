"""Golden comparison: run every build recipe, a scripted partition and a scripted eval on the shared samples, and
record the SHA-256 of every file they write. Used to prove a refactor changes no output byte.

    python scripts/golden.py record  OUT_DIR  > golden.json     # before the change
    python scripts/golden.py compare OUT_DIR  golden.json       # after: exit 1 and list the files that differ

Everything runs through the real ``curriculum`` command (a subprocess per step), on ../shared/data, with a
scripted base model (exact, instant) so partition and eval need no model. Files whose bytes legitimately depend on
the output directory's absolute path are not produced: every step writes under OUT_DIR with the same relative
layout, and OUT_DIR is passed relative to the working directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
INPUTS = {
    ("hotpotqa", "train"): DATA / "hotpotqa" / "hotpot_train_v1.1.sample100.json",
    ("hotpotqa", "dev"): DATA / "hotpotqa" / "hub_distractor_validation.sample300.jsonl",
    ("musique", "train"): DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl",
    ("musique", "dev"): DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl",
    ("2wikimultihopqa", "train"): DATA / "2wikimultihopqa" / "train.sample500.json",
    ("2wikimultihopqa", "dev"): DATA / "2wikimultihopqa" / "train.sample500.json",
}


def recipes() -> list[str]:
    return sorted(p.stem for p in (ROOT / "recipes" / "build").glob("*.yaml") if not p.stem.startswith("_"))


def run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", *args], cwd=cwd, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"golden: `curriculum {' '.join(args)}` failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def build_all(out: Path) -> None:
    cwd = out.parent
    rel = out.name
    for name in recipes():
        args = ["build", f"recipe={name}", f"out={rel}/build/{name}", "n=60", "workers=1"]
        if name.startswith("mixture-craft"):
            args += [f"sources.{i}.input={INPUTS[(ds, 'train')]}" for i, ds in
                     enumerate(["musique", "hotpotqa", "2wikimultihopqa"])]
            args += [f"sources.{i}.n={n}" for i, n in enumerate([30, 20, 20])]
        else:
            ds = name.split("-")[0]
            split = "dev" if "-eval-" in name else "train"
            args += [f"input={INPUTS[(ds, split)]}"]
            if ds == "2wikimultihopqa" and split == "dev":
                args += ["allow_split_mismatch=true"]
            if "-bm25-" in name or name.endswith("-retrieved"):  # these recipes need a BM25 index of the input
                index = f"{rel}/index/{ds}-{split}"
                if not (cwd / index).exists():
                    run(["index", "--dataset", ds, "--input", str(INPUTS[(ds, split)]), "--out", index,
                         "--no-progress"], cwd)
                args += [f"index={index}"]
        run(args, cwd)


def script_for(shards: Path, dest: Path) -> None:
    """A scripted base model: for question i, sample j is right when (i + j) % 3 == 0, a partial answer when it is
    1, and wrong otherwise; the passages cited vary with i."""
    import pyarrow.parquet as pq

    rows = pq.read_table(shards / "data" if (shards / "data").is_dir() else shards).to_pylist()
    script = {}
    for i, r in enumerate(rows):
        ans = r["answers"][0]
        outs = []
        for j in range(8):
            said = ans if (i + j) % 3 == 0 else (f"{ans} and more" if (i + j) % 3 == 1 else "zzzq")
            outs.append(f"<reasoning>\nstep {j}\n</reasoning>\n<answer>\nFinal answer: {said}\n"
                        f"Supporting passages: {1 + i % 3}, {2 + j % 2}\n</answer>")
        script[r["prompt"][-1]["content"]] = outs
    dest.write_text(json.dumps(script, sort_keys=True), encoding="utf-8")


def partition_and_eval(out: Path) -> None:
    cwd = out.parent
    rel = out.name
    mx = out / "build" / "musique-max"
    script_for(mx, out / "script-train.json")
    run(["partition", f"{rel}/build/musique-max", "--backend", "scripted", "--model", f"{rel}/script-train.json",
         "--pass-at", "8", "--chunk-size", "16", "--out", f"{rel}/partition"], cwd)
    evs = ["musique-eval-distractor", "musique-eval-ideal"]
    script = {}
    for name in evs:
        script_for(out / "build" / name, out / f"script-{name}.json")
        script.update(json.loads((out / f"script-{name}.json").read_text(encoding="utf-8")))
    (out / "script-eval.json").write_text(json.dumps(script, sort_keys=True), encoding="utf-8")
    data = [x for name in evs for x in ("--data", f"{rel}/build/{name}")]
    run(["eval", "--model", f"scripted={rel}/script-eval.json", *data, "--backend", "scripted", "--samples", "3",
         "--chunk-size", "16", "--seed", "7", "--out", f"{rel}/eval"], cwd)


def digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("record", "compare"):
        sys.exit(__doc__)
    out = Path(sys.argv[2]).resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"golden: {out} is not empty; give a fresh directory")
    out.mkdir(parents=True, exist_ok=True)
    build_all(out)
    partition_and_eval(out)
    got = digests(out)
    if sys.argv[1] == "record":
        print(json.dumps(got, indent=1, sort_keys=True))
        return
    want = json.loads(Path(sys.argv[3]).read_text(encoding="utf-8"))
    bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    for k in bad:
        print(f"differs: {k} (before {want.get(k, 'absent')[:12]}, after {got.get(k, 'absent')[:12]})")
    print(f"golden: {len(got)} files compared, {len(bad)} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
