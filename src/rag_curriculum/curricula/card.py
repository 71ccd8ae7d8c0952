"""The data card of a build: front matter, what it is, how it was made, statistics, and the level plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cards import front_matter, md_table, plot_levels

LEVEL_PLOT = "level_by_index.png"


def write_build_card(directory: Path, manifest: dict[str, Any], levels: Sequence[int]) -> None:
    cfg = manifest["config"]
    sources = [s["dataset"] for s in manifest["sources"]]
    kind = manifest["kind"]
    if kind == "curriculum":
        title = f"RAG-RL {cfg['schedule']} curriculum ({', '.join(sources)})"
    else:
        title = f"RAG-RL {kind} evaluation set ({', '.join(sources)})"
    plot_levels(levels, directory / LEVEL_PLOT, title=title)
    counts = manifest["counts"]
    lines = [front_matter(sources=sources, num_rows=manifest["num_rows"], pretty_name=title), f"# {title}", ""]
    if kind == "curriculum":
        lines += [
            f"{manifest['num_rows']} rows in training order, built by rag-curriculum {manifest['toolkit']['version']} "
            f"with the `{cfg['schedule']}` schedule, `{cfg['order']}` ordering, seed {manifest['seed']}, "
            f"K = {', '.join(f'{v} ({k})' for k, v in manifest['K'].items())}. A row of level l holds every gold passage and d = min(max(l + 2 - j, 0), k) "
            "distractors (RAG-RL section 3.2); `curriculum_index` is the training position. Train with the "
            "dataset order kept (TRL: `shuffle_dataset=False`; verl: `data.shuffle=False`).", ""]
    else:
        lines += [
            f"{manifest['num_rows']} evaluation rows in the `{kind}` setting (RAG-RL section 4.5): "
            + ("all gold passages plus the provided distractors, at most "
               f"{cfg['max_distractors']}." if kind == "distractor" else "gold passages only (ideal retrieval)."),
            ""]
    lines += ["## How it was made", "", "```", manifest["command"], "```", ""]
    lines += ["## Sources", "", md_table(
        ["dataset", "input", "split", "records", "sampled", "excluded", "skipped", "licence", "sha256"],
        [[s["dataset"], s["input"] or s["hub"], s["split"], s["records_loaded"], s["sampled"],
          s["excluded"] or "-", s["skipped"] or "-", s["license"], (s["sha256"] or "-")[:16]]
         for s in manifest["sources"]]), ""]
    lines += ["## Statistics", "", "Rows per level:", "",
              md_table(["level", "rows"], counts["levels"].items()), "",
              "Rows per hops (gold passages):", "", md_table(["hops", "rows"], counts["hops"].items()), "",
              f"Mean passages per row: {counts['passages_mean']}.", ""]
    if manifest.get("trainer_tail"):
        t = manifest["trainer_tail"]
        lines += [f"With {t['batch_prompts']} prompts per optimiser step a trainer runs {t['steps']} steps and "
                  f"never sees the last {t['unseen_rows']} row(s).", ""]
    if manifest.get("leakage"):
        lk = manifest["leakage"]
        lines += [f"Leakage check against {lk['eval_sets']}: {lk['by_id']} shared by id, {lk['by_question']} by "
                  f"question text (policy `{lk['policy']}`).", ""]
    lines += [f"![level against row index]({LEVEL_PLOT})", "",
              "## Columns", "", "`prompt` (system + user messages), `answers` (answer then aliases), `passages` "
              "(label, title, text, is_gold, in presented order), `gold_labels`, `level`, `num_distractors`, "
              "`hops`, `curriculum_index`, verl's `data_source` / `ability` / `reward_model` / `extra_info`, "
              "`source_id`, `split`, `qtype`, `setting`, `template`.", ""]
    (directory / "README.md").write_text("\n".join(lines), encoding="utf-8")
