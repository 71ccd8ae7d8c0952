"""The data card of a build, rendered from the template ``data_cards/build.md``: front matter, what the rows
are, how they were made, statistics, and the level plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

from ..cards import front_matter, md_table, plot_levels

LEVEL_PLOT = "level_by_index.png"
TEMPLATE = "build.md"


def template_path(name: str = TEMPLATE) -> Path:
    """The card template, inside the installed package (the wheel carries ``data_cards/``) or the checkout."""
    from importlib.resources import files

    packaged = Path(str(files("rag_curriculum"))) / "data_cards" / name
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "data_cards" / name


def describe(manifest: dict[str, Any]) -> tuple[str, str]:
    """The card's title and first paragraph."""
    cfg = manifest["config"]
    sources = ", ".join(s["dataset"] for s in manifest["sources"])
    kind = manifest["kind"]
    if kind == "curriculum":
        title = f"RAG-RL {cfg['schedule']} curriculum ({sources})"
        ks = ", ".join(f"{v} ({k})" for k, v in manifest["K"].items())
        text = (f"{manifest['num_rows']} rows in training order, built by rag-curriculum "
                f"{manifest['toolkit']['version']} with the `{cfg['schedule']}` schedule, `{cfg['order']}` ordering, "
                f"seed {manifest['seed']}, K = {ks}. A row of level l holds every gold passage and "
                "d = min(max(l + 2 - j, 0), k) distractors (RAG-RL section 3.2); `curriculum_index` is the training "
                "position. Train with the dataset order kept (TRL: `shuffle_dataset=False`; verl: "
                "`data.shuffle=False`).")
    else:
        title = f"RAG-RL {kind} evaluation set ({sources})"
        what = (f"all gold passages plus the provided distractors, at most {cfg['max_distractors']}"
                if kind == "distractor" else "gold passages only (ideal retrieval)")
        text = f"{manifest['num_rows']} evaluation rows in the `{kind}` setting (RAG-RL section 4.5): {what}."
    return title, text


def write_build_card(directory: Path, manifest: dict[str, Any], levels: Sequence[int]) -> None:
    title, description = describe(manifest)
    plot_levels(levels, directory / LEVEL_PLOT, title=title)
    counts = manifest["counts"]
    tail = leakage = ""
    if manifest.get("trainer_tail"):
        t = manifest["trainer_tail"]
        tail = (f"\nWith {t['batch_prompts']} prompts per optimiser step a trainer runs {t['steps']} steps and never "
                f"sees the last {t['unseen_rows']} row(s).\n")
    if manifest.get("leakage"):
        lk = manifest["leakage"]
        leakage = (f"\nLeakage check against {lk['eval_sets']}: {lk['by_id']} shared by id, {lk['by_question']} by "
                   f"question text (policy `{lk['policy']}`).\n")
    lengths = prompt_lengths_text(manifest.get("prompt_tokens"))
    card = Template(template_path().read_text(encoding="utf-8")).substitute(
        front_matter=front_matter(sources=[s["dataset"] for s in manifest["sources"]],
                                  num_rows=manifest["num_rows"], pretty_name=title).rstrip("\n"),
        title=title,
        description=description,
        command=manifest["command"],
        provenance=f"Seed {manifest['seed']}; the resolved configuration and a SHA-256 of every shard are in "
                   "`manifest.json`.",
        sources_table=md_table(
            ["dataset", "input", "split", "records", "sampled", "excluded", "skipped", "licence", "sha256"],
            [[s["dataset"], s["input"] or s["hub"], s["split"], s["records_loaded"], s["sampled"],
              s["excluded"] or "-", s["skipped"] or "-", s["license"], (s["sha256"] or "-")[:16]]
             for s in manifest["sources"]]),
        levels_table=md_table(["level", "rows"], counts["levels"].items()),
        hops_table=md_table(["hops", "rows"], counts["hops"].items()),
        passages_mean=counts["passages_mean"],
        tail=tail,
        leakage=leakage,
        lengths=lengths,
        level_plot=LEVEL_PLOT,
        directory=manifest["config"].get("out") or ".",
    )
    (directory / "README.md").write_text(card, encoding="utf-8")


def prompt_lengths_text(record: dict[str, Any] | None) -> str:
    """The card's paragraph on prompt lengths (builds with ``--tokenizer``), or nothing."""
    if not record:
        return ""
    lg = record["longest"]
    table = md_table(["level", "longest prompt (tokens)"], record["max_by_level"].items())
    return (f"\nPrompt lengths in tokens (the `prompt_tokens` column: the prompt with the chat template of "
            f"`{record['tokenizer']}` applied, generation prompt included; template SHA-256 "
            f"`{record['chat_template_sha256'][:16]}`): the longest is {lg['tokens']} tokens (row `{lg['id']}`, "
            f"curriculum_index {lg['curriculum_index']}, level {lg['level']}), the mean {record['mean']}. A trainer "
            "must accept prompts of that length plus its completion length: `curriculum train` and "
            "`recipes/verl/run_grpo.sh` refuse a curriculum that does not fit instead of truncating it.\n\n"
            f"{table}\n")
