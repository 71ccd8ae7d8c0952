"""Data cards, the one card module: a ``README.md`` with Hugging Face dataset-card front matter, what the rows
are, the command that made them, statistics and plots (PNG, written beside the card).

Each kind of card is a template in ``data_cards/`` (``build.md``, ``partition.md``; Python ``string.Template``)
rendered by :func:`render_card`; this module computes the template's fields from the manifest the card sits
beside (:func:`write_build_card` for ``curriculum build``, :func:`write_partition_card` for each bucket of
``curriculum partition``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from string import Template
from typing import Any

import yaml

# The card plots are drawn by the toolkit's one plotting module; their names stay here: ``pyplot`` (matplotlib on
# Agg), ``plot_levels`` (level against curriculum index), ``plot_histogram`` (the partition card's pass rates).
from ._plots import plot_build_levels as plot_levels
from ._plots import plot_histogram as plot_histogram
from ._plots import pyplot as pyplot
from .difficulty.accuracy import ANSWERABLE, LEARNABLE, UNANSWERABLE
from .difficulty.profile import schedules_section
from .loaders import get_loader

LEVEL_PLOT = "level_by_index.png"
TEMPLATE = "build.md"
PARTITION_TEMPLATE = "partition.md"


def template_path(name: str = TEMPLATE) -> Path:
    """The card template, inside the installed package (the wheel carries ``data_cards/``) or the checkout."""
    from importlib.resources import files

    packaged = Path(str(files("rag_curriculum"))) / "data_cards" / name
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "data_cards" / name


def render_card(name: str, **fields: Any) -> str:
    """The template ``data_cards/<name>`` with every ``$field`` filled (a missing one is a ``KeyError``)."""
    return Template(template_path(name).read_text(encoding="utf-8")).substitute(**fields)


def licenses_for(sources: Iterable[str]) -> list[str]:
    """The licences the rows inherit from their source datasets (one per source, deduplicated, sorted)."""
    return sorted({get_loader(s).license for s in sources})


def size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"


#: The card's ``configs`` pattern: the shards under ``data/`` (the Hugging Face layout; ``datasets`` sorts the
#: matched files by name, which is curriculum order).
DATA_FILES = "data/*.parquet"


def hub_ids(sources: Iterable[str]) -> list[str]:
    """The Hub dataset ids of the source datasets (``source_datasets`` in the card), as the loaders download them."""
    return sorted({get_loader(s).hub_path for s in sources})


def dataset_info(shards: Sequence[Mapping[str, Any]], num_rows: int) -> list[str]:
    """The card's ``dataset_info`` (YAML lines): the split's rows and the shards' bytes, from the manifest.

    ``datasets.load_dataset(DIR)`` keys its cache by the folder's name, the card's ``configs`` and this block only
    (not by the files' contents): without it two curricula in folders of the same name, or a bucket rewritten in
    place, would load the rows cached for the first. The rows and the exact Parquet bytes make the key follow the
    data. ``num_bytes`` is the Parquet bytes too (``datasets`` checks only ``num_examples``).

    >>> for line in dataset_info([{"bytes": 10, "rows": 2}, {"bytes": 5, "rows": 1}], 3): print(line)
    dataset_info:
      config_name: default
      download_size: 15
      splits:
      - name: train
        num_bytes: 15
        num_examples: 3
    """
    size = sum(int(s["bytes"]) for s in shards)
    return ["dataset_info:", "  config_name: default", f"  download_size: {size}", "  splits:", "  - name: train",
            f"    num_bytes: {size}", f"    num_examples: {int(num_rows)}"]


#: A licence as the Hub names it in a card (``cc-by-sa-4.0``, ``apache-2.0``, ``other``).
_HUB_LICENSE = re.compile(r"[a-z0-9][a-z0-9.\-]*")


def _yaml_text(text: str) -> str:
    """``text`` as a YAML scalar: as it is where YAML reads it back as that text, else double-quoted (JSON's
    quoting is YAML's).

    >>> _yaml_text("RAG-RL linear curriculum (hotpotqa)"), _yaml_text("a: b"), _yaml_text("yes")
    ('RAG-RL linear curriculum (hotpotqa)', '"a: b"', '"yes"')
    """
    try:
        plain = yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text, ensure_ascii=False)


def front_matter(*, sources: Sequence[str], num_rows: int, pretty_name: str, tags: Sequence[str] = (),
                 shards: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The card's YAML header; with the manifest's ``shards``, its :func:`dataset_info` too."""
    # a licence the Hub does not know by id (Search-R1's files: "the licence of each source set (NQ: ...)") is
    # `other` (the card's text says which); written as it is, its ": " made the front matter YAML no parser reads
    lic = sorted({x if _HUB_LICENSE.fullmatch(x) else "other" for x in licenses_for(sources)})
    lines = ["---"]
    if len(lic) == 1:
        lines.append(f"license: {lic[0]}")
    else:
        lines.append("license:")
        lines += [f"- {x}" for x in lic]
    lines += ["language:", "- en", "task_categories:", "- question-answering", "tags:"]
    lines += [f"- {t}" for t in ("rag", "multi-hop-qa", "curriculum-learning", "grpo", *tags)]
    lines += ["size_categories:", f"- {size_category(num_rows)}", "source_datasets:"]
    lines += [f"- {x}" for x in hub_ids(sources)]
    lines += [f"pretty_name: {_yaml_text(pretty_name)}", "configs:", "- config_name: default", "  data_files:",
              "  - split: train", f"    path: {DATA_FILES}"]
    if shards is not None:
        lines += dataset_info(shards, num_rows)
    lines += ["---", ""]
    return "\n".join(lines)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


# -- the build card -------------------------------------------------------------------------------------------------
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


def write_build_card(directory: Path, manifest: dict[str, Any], levels: Sequence[int],
                     retriever: Mapping[str, str] | None = None, shown: Sequence[int] | None = None) -> None:
    """The build's data card (``README.md``) and level plot; ``retriever``: :func:`distractors_text`'s; ``shown``:
    the level each row shows as built (:func:`~rag_curriculum.difficulty.synthetic.shown_level`), drawn beside."""
    title, description = describe(manifest)
    short = [(r["curriculum_index"], r["shows"]) for r in (manifest.get("short_rows") or {}).get("rows", [])]
    plot_levels(levels, directory / LEVEL_PLOT, title=title, shown=shown, short=short)
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
    lengths = prompt_lengths_text(manifest.get("prompt_tokens")) + distractors_text(manifest.get("distractors"), retriever)
    card = render_card(
        TEMPLATE,
        front_matter=front_matter(sources=[s["dataset"] for s in manifest["sources"]],
                                  num_rows=manifest["num_rows"], pretty_name=title,
                                  shards=manifest.get("shards")).rstrip("\n"),
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
        levels_table=(as_built_table(counts["by_level"], counts["levels"]) if counts.get("by_level")
                      else md_table(["level", "rows"], counts["levels"].items())),
        capped="".join(f"\n{text}\n" for text in (capped_levels_text(manifest.get("capped_levels"),
                                                                       manifest["num_rows"]),
                                                    short_rows_text(manifest.get("short_rows"))) if text),
        hops_table=md_table(["hops", "rows"], counts["hops"].items()),
        passages_mean=counts["passages_mean"],
        tail=tail,
        leakage=leakage,
        lengths=lengths,
        unanswerable=unanswerable_text(manifest.get("unanswerable")),
        profile=schedules_section(manifest.get("profile")),
        level_plot=LEVEL_PLOT,
        directory=manifest["config"].get("out") or ".",
    )
    (directory / "README.md").write_text(card, encoding="utf-8")


def unanswerable_text(record: dict[str, Any] | None) -> str:
    """The card's paragraph on unanswerable rows (builds with ``--unanswerable-fraction``), or nothing."""
    if not record:
        return ""
    short = ""
    if record["short_rows"]:
        short = (f" {record['short_rows']} unanswerable row(s) ran out of distractors before every gold passage "
                 f"was replaced and show {record['missing_passages']} passage(s) fewer in all.")
    table = md_table(["dataset", "answerable rows", "unanswerable rows"],
                     [[k, v["answerable"], v["unanswerable"]] for k, v in record["by_source"].items()])
    return (f"\nAnswerable rows: {record['answerable_rows']:,}; unanswerable rows: {record['unanswerable_rows']:,} "
            f"(`--unanswerable-fraction {record['fraction']}`, drawn per question from the seed). An unanswerable "
            "row shows no gold passage (each is replaced by another distractor), expects the final answer "
            f"`{record['abstention_answer']}` with no supporting passage, and has `answerable` false; every prompt "
            f"of this set tells the model it may give that answer.{short}\n\n{table}\n")


def distractors_text(record: dict[str, Any] | None, retriever: Mapping[str, str] | None = None) -> str:
    """The card's paragraph on where the passages came from (builds with an index), or nothing. ``retriever``: what
    the index's kind says of itself (``label``, ``what`` its distractors are, its ``settings`` in one line), given
    by the build, which knows the kinds."""
    if not record:
        return ""
    ix = record["index"]
    kind = ix.get("retriever", "bm25")
    retriever = retriever or {}
    name = retriever.get("label") or kind
    what = {"mixed": f"provided and {name} distractors alternately (provided first)",
            "retrieved": f"the retrieved setting: the {record.get('top_k')} best {name} passages of each question, "
                         "gold not forced in"}.get(record["source"]) or retriever.get("what") or f"{name} distractors"
    parts = [retriever["settings"]] if retriever.get("settings") else []
    text = (f"\nPassages: {what}. Index `{ix['path']}` ({ix['passages']:,} passages of {ix['dataset']}; "
            f"{'; '.join(parts)}).\n\n"
            + md_table(["passage", "origin", "count"],
                       [[*k.split(":"), v] for k, v in record["origins"].items()]) + "\n")
    if record.get("excluded"):
        ex = record["excluded"]
        text += (f"\nRanked passages skipped: {ex.get('gold_copy', 0)} copies of a gold paragraph, "
                 f"{ex.get('answer', 0)} containing an answer, {ex.get('provided_copy', 0)} copies of a provided "
                 "paragraph (mixed).\n")
    if record.get("distractor_bm25_ranks"):
        text += "\n" + md_table([f"{name} rank of the distractors", "count"],
                                record["distractor_bm25_ranks"].items()) + "\n"
    if record.get("gold_recall"):
        gr = record["gold_recall"]
        text += (f"\nGold recall@{record.get('top_k')}: mean {gr['mean']}; all gold retrieved in {gr['all']} rows, "
                 f"some in {gr['some']}, none in {gr['none']}.\n\n"
                 + md_table(["recall", "rows"], gr["distribution"].items()) + "\n")
    return text


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


def _and(items: Sequence[Any]) -> str:
    """``1``, ``1 and 2``, ``1, 2 and 3``."""
    items = [str(x) for x in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def capped_levels_text(record: Mapping[str, Any] | None, num_rows: int) -> str:
    """What the build says of the levels that cannot get the distractors they ask for (the manifest's
    ``capped_levels``: :func:`~rag_curriculum.difficulty.synthetic.collapsed_levels` per dataset, and the distractor
    source), in one paragraph: the build's warning, the card's and ``inspect``'s note; empty without any.

    >>> group = {"dataset": "hotpotqa", "as_level": 8, "levels": [8, 9, 10], "capped": [9, 10], "rows": 30,
    ...          "short_rows": 20, "max_distractors": 8}
    >>> print(capped_levels_text({"distractors": "provided", "groups": [group]}, 100))
    Levels 8, 9 and 10 of hotpotqa hold the same difficulty (30 rows, 30.0% of the curriculum): levels 9 and 10 ask for more distractors than their questions have (at most 8 each), so 20 of their rows show what level 8 shows. `--distractors bm25 --index DIR` (an index of `curriculum index`) would fill them with each question's best-ranked passages.
    """
    if not record or not record.get("groups"):
        return ""
    parts = []
    for g in record["groups"]:
        capped = g["capped"]
        which = f"level{'s' if len(capped) > 1 else ''} {_and(capped)}"
        ask = "ask" if len(capped) > 1 else "asks"
        if len(g["levels"]) > 1:
            head = (f"Levels {_and(g['levels'])} of {g['dataset']} hold the same difficulty ({g['rows']:,} rows, "
                    f"{100 * g['rows'] / max(num_rows, 1):.1f}% of the curriculum): {which}")
        else:
            head = f"Level {capped[0]} of {g['dataset']} ({g['rows']:,} rows)"
        parts.append(f"{head} {ask} for more distractors than their questions have (at most "
                     f"{g['max_distractors']} each), so {g['short_rows']:,} of their rows show what level "
                     f"{g['as_level']} shows.")
    source = record.get("distractors") or "provided"
    if source == "provided":
        parts.append("`--distractors bm25 --index DIR` (an index of `curriculum index`) would fill them with each "
                     "question's best-ranked passages.")
    else:
        parts.append(f"The `{source}` index ranks too few passages for them: an index built deeper "
                     "(`curriculum index ... --depth N`) would fill them.")
    return " ".join(parts)


def short_rows_text(record: dict[str, Any] | None) -> str:
    """The build's warning and the card's note on the rows short of their level (the manifest's ``short_rows``:
    :func:`rag_curriculum.curricula._plan.short_of_level`); empty without any.

    >>> rec = {"count": 1, "rows": [{"id": "5ade", "dataset": "hotpotqa", "curriculum_index": 170, "level": 6,
    ...        "asked": 6, "shown": 0, "shows": 0}]}
    >>> print(short_rows_text(rec))  # doctest: +NORMALIZE_WHITESPACE
    1 row falls short of the distractors its level asks for (its question has no more), which its level's mean
    hides: 5ade (hotpotqa, curriculum_index 170) at level 6 shows 0 of 6 distractors, what level 0 shows.
    `--distractors bm25 --index DIR` would fill it from the corpus.
    """
    if not record or not record.get("rows"):
        return ""
    n = record["count"]
    named = "; ".join(f"{r['id']} ({r['dataset']}, curriculum_index {r['curriculum_index']}) at level {r['level']} "
                      f"shows {r['shown']} of {r['asked']} distractors, what level {r['shows']} shows"
                      for r in record["rows"][:SHORT_ROWS_SAID])
    more = f"; and {n - SHORT_ROWS_SAID} more (manifest.json: short_rows)" if n > SHORT_ROWS_SAID else ""
    head = (f"{n} row falls short of the distractors its level asks for (its question has no more), which its "
            "level's mean hides" if n == 1 else
            f"{n} rows fall short of the distractors their level asks for (their questions have no more), which "
            "their level's mean hides")
    fill = "`--distractors bm25 --index DIR` would fill " + ("it" if n == 1 else "them") + " from the corpus."
    return f"{head}: {named}{more}. {fill}"


#: The rows short of their level the build's warning and the card name (the manifest names more).
SHORT_ROWS_SAID = 2


def as_built_table(built: Mapping[Any, Mapping[str, Any]], levels: Mapping[str, int] | None = None) -> str:
    """The card's rows per level with what they hold as built (:func:`~rag_curriculum.difficulty.synthetic.
    levels_as_built`; a level without passages, Search-R1's questions, shows its rows only)."""
    built = {str(k): v for k, v in built.items()}
    rows = []
    for level, n in (levels or {k: v["rows"] for k, v in built.items()}).items():
        b = built.get(str(level))
        if not b:
            rows.append([level, n, "-", "-", "-", "-", "-"])
            continue
        fewest = b.get("distractors_min")  # a manifest written before it was recorded has none
        rows.append([level, n, f"{b['asked']:g}", f"{b['distractors']:g}", "-" if fewest is None else fewest,
                     f"{b['passages']:g}", b["short_rows"] or "-"])
    return md_table(["level", "rows", "distractors asked", "distractors shown (mean)", "fewest shown", "passages",
                     "rows short"], rows)


# -- the partition card ---------------------------------------------------------------------------------------------
def write_partition_card(directory: Path, manifest: Mapping[str, Any], bucket: str, *, plot: str | None = None
                         ) -> None:
    """The card of one bucket of a partition (``answerable``, ``unanswerable`` or ``learnable``), rendered from
    ``data_cards/partition.md``; ``plot`` names the pass-rate plot written beside it, if any."""
    part = manifest["partition"]
    counts = part["counts"]
    gen = manifest["generation"]
    g = gen["fingerprint"]["generation"]
    sampling = gen["sampling"]
    n = sampling["n"]
    sources = sorted(manifest["counts"]["sources"]) or [s["dataset"] for s in manifest.get("sources", [])]
    model = g.get("model") or "?"
    pretty = {ANSWERABLE: "base-answerable", UNANSWERABLE: "base-unanswerable", LEARNABLE: "learnable"}[bucket]
    title = f"RAG-RL {pretty} questions ({', '.join(sources) or '?'}, {Path(str(model)).name}, pass@{n})"
    description = (
        f"{manifest['num_rows']:,} rows: the questions of `{manifest['input']['path']}` for which {part['rule']}. "
        f"Each question was answered {n} times by `{model}` ({g.get('backend')} backend; temperature "
        f"{sampling['temperature']}, top-p {sampling['top_p']}, at most {sampling['max_tokens']} tokens, seed "
        f"{sampling['seed']}); each final answer was scored by answer F1 against the gold answer and its aliases "
        "(RAG-RL section 3.2, appendix A). Rows keep the input's columns and order (`curriculum_index` is "
        "renumbered; `input_index` is the input position) and add `n`, `c` (samples with F1 = 1), `sample_f1`, "
        "`max_f1`, `mean_f1`, `pass_rate` (c/n: c correct of the n = --pass-at samples), `pass_at_k` (unbiased pass@j for j = 1..n) and "
        "`num_valid_format`.")
    if manifest["num_rows"] == 0:  # the normal result for a weak model: say how it reads
        description += (" This bucket is empty: `rag_curriculum.shards.load_hf_dataset` (and every command of the "
                        "toolkit) reads it as an empty dataset with these columns, and `curriculum train` refuses "
                        "it; `datasets.load_dataset(DIR, split=\"train\", streaming=True)` reads it as an empty "
                        "iterable dataset with these features, while `datasets.load_dataset` without streaming "
                        "builds no split of 0 rows and raises \"corresponds to no data\" (its split reader skips "
                        "a split of 0 examples).")
    digest = (g.get("model_file") or {}).get("gguf_sha256") or (
        (g.get("files") or {}).get("model") if str(model).lower().endswith(".gguf") else None)
    if digest:  # a .gguf file: records keep its name only (no absolute path), so its digest says which file it was
        description += (f" The model was the GGUF file `{Path(str(model)).name}` with SHA-256 `{digest}`; "
                        "records name a file outside this folder by its name only, so to run the command below "
                        "again, give the path of the file with that digest.")
    bal = part["balance"]
    balanced = ""
    if bal["enabled"] and bucket != LEARNABLE:
        balanced = (f"\nBalanced as in the paper: {bal['answerable_before']:,} answerable and "
                    f"{bal['unanswerable_before']:,} unanswerable questions were clipped to {bal['size']:,} each "
                    f"with seed {manifest['seed']}.\n")
    scored = max(counts["scored"], 1)
    format_valid = ""
    if counts.get("format_valid_rate") is not None:
        format_valid = (f"\nSamples that keep the output format: {counts['format_valid_rate']:.1%}. Mean max F1: "
                        f"{counts['mean_max_f1']:.4f}.\n")
    tail = ""
    if manifest.get("trainer_tail"):
        t = manifest["trainer_tail"]
        tail = (f"\nWith {t['batch_prompts']} prompts per optimiser step a trainer runs {t['steps']} steps and "
                f"never sees the last {t['unseen_rows']} row(s).\n")
    rc = manifest["counts"]
    card = render_card(
        PARTITION_TEMPLATE,
        front_matter=front_matter(sources=sources, num_rows=manifest["num_rows"], pretty_name=title,
                                  tags=("pass-at-k", "accuracy-based-difficulty"),
                                  shards=manifest.get("shards")).rstrip("\n"),
        title=title,
        description=description,
        balance=balanced,
        command=str(manifest.get("command")),
        counts_table=md_table(["", "questions"], [
            ["questions", f"{counts['questions']:,}"], ["skipped (prompt too long)", f"{counts['skipped']:,}"],
            ["base-answerable (c > 0)", f"{counts[ANSWERABLE]:,}"],
            ["base-unanswerable (c = 0)", f"{counts[UNANSWERABLE]:,}"],
            ["learnable (0 < c < k)", f"{counts[LEARNABLE]:,}"]]),
        histogram_table=md_table(
            ["c", "pass rate c/k", "questions", "share"],
            [[c, f"{int(c) / n:.3f}", f"{q:,}", f"{q / scored:.1%}"]
             for c, q in counts["correct_samples_histogram"].items()]),
        pass_at_k_table=md_table(
            ["k", "pass@k"], [[k, "-" if v is None else f"{v:.4f}"] for k, v in counts["mean_pass_at_k"].items()]),
        format_valid=format_valid,
        plot="" if plot is None else f"\n![distribution of pass rates]({plot})\n",
        hops_table=md_table(["hops", "rows"], rc["hops"].items()),
        levels_table=md_table(["level", "rows"], rc["levels"].items()),
        tail=tail,
    )
    (directory / "README.md").write_text(card, encoding="utf-8")
