"""Reports: the summary of an evaluation run (JSON), its Markdown tables laid out like the paper's, and the
side-by-side comparison of several runs.

A summary is a dict with ``evals``: one entry per (model, dataset, setting) holding ``overall`` and the
breakdowns ``by_hops``, ``by_level``, ``by_format`` (sample-level), ``by_bucket`` (base-answerable /
base-unanswerable, when partition statistics were given) and ``format_reasons``. Everything in this module
reads summaries only, so ``curriculum eval compare`` can lay out runs made elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plumbing import atomic_write_text
from .._titles import (
    MAIN_METRICS,
    _cells,
    _dataset_order,
    _index,
    _models,
    _models_at,
    _setting_order,
    dataset_title,
    metric_title,
    pct,
    setting_title,
)
from ..cards import md_table
from ..errors import ConfigError
from ._outcomes import add_outcomes, outcome_sections
from ._scoring import (
    BREAKDOWNS,
    bootstrap_intervals,
    breakdown,
    breakdown_by_format,
    eval_scorers,
    format_reasons,
    paired_difference,
    summarize,
)

__all__ = [
    "SUMMARY_KIND",
    "SUMMARY_VERSION",
    "ZERO_MARK",
    "ZERO_WHY",
    "compare_summaries",
    "dataset_title",
    "load_summary",
    "main_table",
    "paired_across_runs",
    "paired_comparisons",
    "paired_table",
    "render_report",
    "render_table",
    "setting_title",
    "summarize_entry",
    "zero_notes",
]

SUMMARY_KIND = "rag-curriculum/eval-summary"
SUMMARY_VERSION = 1
SUMMARY_FILE = "summary.json"

def summarize_entry(records: Sequence[Mapping[str, Any]], **identity: Any) -> dict[str, Any]:
    """The summary entry of one (model, dataset, setting): ``identity`` (model, dataset, setting, paths, ...)
    plus ``overall``, the breakdowns and ``format_reasons``, all computed from the per-question ``records``."""
    entry: dict[str, Any] = dict(identity)
    entry["n_questions"] = len(records)
    ms = sorted({int(r["m"]) for r in records})
    entry["m"] = ms[0] if len(ms) == 1 else ms
    entry["skipped"] = sum(1 for r in records if r.get("skipped"))  # prompts too long for the model: scored 0
    entry["overall"] = summarize(records)
    entry["intervals"] = bootstrap_intervals(records)  # 95% percentile bootstrap over questions
    for key, column in BREAKDOWNS.items():
        b = breakdown(records, column)
        if b or key != "by_bucket":
            entry[key] = b
    entry["by_format"] = breakdown_by_format(records)
    entry["format_reasons"] = format_reasons(records)
    add_outcomes(entry, records)  # abstention, retrieval outcome: only on sets that have them
    return entry


def paired_comparisons(items: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]
                       ) -> list[dict[str, Any]]:
    """The paired differences a summary reports (``summary["paired"]``), from ``(entry, records)`` of every
    evaluation: on each dataset and setting, every model after the first minus the first (``kind: "models"``);
    for each model and dataset, every setting after the first (distractor, ideal, retrieved) minus the first
    (``kind: "settings"``). Each over the questions both sides scored, with a 95% paired bootstrap interval
    (:func:`~rag_curriculum.evaluation._scoring.paired_difference`); the differences are fractions, ``a - b``."""
    idx: dict[tuple[str, str, str], Sequence[Mapping[str, Any]]] = {}
    seen: set[tuple[str, str, str]] = set()
    for e, records in items:
        key = (e["model"], e["dataset"], e["setting"])
        if key in seen:  # one cell twice (the same set in several output formats): no unambiguous pair
            idx.pop(key, None)
            continue
        seen.add(key)
        idx[key] = records
    evals = [{"model": k[0], "dataset": k[1], "setting": k[2]} for k in idx]
    models, datasets, settings = _models(evals), _dataset_order(k[1] for k in idx), _setting_order(k[2] for k in idx)
    out: list[dict[str, Any]] = []

    def add(kind: str, a: tuple[str, str, str], b: tuple[str, str, str], **where: str) -> None:
        d = paired_difference(idx[a], idx[b])
        if d is not None:
            names = (a[0], b[0]) if kind == "models" else (a[2], b[2])
            out.append({"kind": kind, **where, "a": names[0], "b": names[1], **d})

    for setting in settings:
        for d in datasets:
            here = [m for m in models if (m, d, setting) in idx]
            for m in here[1:]:
                add("models", (m, d, setting), (here[0], d, setting), dataset=d, setting=setting)
    for m in models:
        for d in datasets:
            here = [st for st in settings if (m, d, st) in idx]
            for st in here[1:]:
                add("settings", (m, d, st), (m, d, here[0]), dataset=d, model=m)
    return out


def _signed(x: float) -> str:
    return f"{100 * x:+.2f}"


def paired_table(summary: Mapping[str, Any], *, metrics: Sequence[str] = MAIN_METRICS, sep: str = " "
                 ) -> tuple[list[str], list[list[str]]] | None:
    """The header and rows of the paired differences (``summary["paired"]``): one row per comparison, each
    metric's difference x 100 with its 95% interval (after ``sep``); None when the summary has none."""
    paired = summary.get("paired") or []
    if not paired:
        return None
    header = ["Difference", "Dataset", "Questions", *(metric_title(m) for m in metrics)]
    rows = []
    for p in paired:
        what = (f"{p['a']} − {p['b']}{sep}({setting_title(p['setting'])})" if p["kind"] == "models"
                else f"{p['model']}:{sep}{setting_title(p['a'])} − {setting_title(p['b'])}")
        rows.append([what, dataset_title(p["dataset"]), str(p["n_questions"]),
                     *(f"{_signed(p['difference'][m])}{sep}[{_signed(p['intervals'][m][0])}, "
                       f"{_signed(p['intervals'][m][1])}]" for m in metrics)])
    return header, rows


#: What follows a 0 that :func:`zero_notes` explains, in the tables and before each note.
ZERO_MARK = "†"

#: The page that explains why a base model's citation (and so joint) F1 is 0.
ZERO_DOC = "docs/base-models.md#why-citation-and-joint-f1-are-0"


def zero_notes(summary: Mapping[str, Any], *, metrics: Sequence[str] = MAIN_METRICS,
               section: str = "overall") -> list[tuple[tuple[str, str, str], str]]:
    """Why a cell of the main table is 0 when it is 0 because no sample kept the output format:
    ``((model, dataset, setting), note)`` for every such entry, the note naming the metrics, the format-failure
    reasons counted; :data:`ZERO_WHY` explains them, with the page that says more (:data:`ZERO_DOC`)."""
    notes = []
    for setting, d, model, e in _cells(summary["evals"]):
        agg = _section(e, section)
        if not agg or agg.get("format_valid") is None or agg["format_valid"] > 0:
            continue
        zero = [m for m in metrics if agg.get(m) == 0]
        if not zero:
            continue
        reasons = e.get("format_reasons") or {}
        counted = ", ".join(f"{k} {v}" for k, v in reasons.items()) or "none recorded"
        names = " and ".join(metric_title(m) for m in zero)
        notes.append(((model, d, setting), (
            f"{model} on {dataset_title(d)} ({setting_title(setting).lower()}): {names} 0, and no sample kept the "
            f"output format (invalid samples by reason: {counted})")))
    return notes


#: What follows the notes of :func:`zero_notes`, once.
ZERO_WHY = ("A completion without the format's citation line cites nothing, so its citation F1, and the joint F1 "
            f"with it, is 0; base models do not write that line unless trained to ({ZERO_DOC}).")


def _bold_best(cells: list[list[str]], values: list[list[float | None]]) -> None:
    """Bold the best value of each column (when more than one row has a value and they are not all the same: a
    column of equal values, all 0.00 say, has no best), in place. Values are compared as printed (x 100, two
    decimals), so every cell that shows the best number is bolded."""
    if len(cells) < 2:
        return
    for c in range(len(values[0])):
        shown = [pct(v[c]) for v in values if v[c] is not None]
        if len(shown) < 2 or len(set(shown)) == 1:
            continue
        best = max(shown, key=float)
        for r, row in enumerate(values):
            if row[c] is not None and pct(row[c]) == best:
                cells[r][c] = f"**{cells[r][c]}**"


#: The card that makes an evaluation's --out a Hugging Face dataset: ``datasets.load_dataset(OUT, split="test")``
#: reads its per-question records (the folder holds other JSON files, eval_config.json and summary.json, that
#: datasets' file inference would otherwise take for the test split).
CARD_FILE = "README.md"


def write_dataset_card(out: str | Path, *, data_files: str, rows: str, title: str) -> Path:
    """``OUT/README.md``: a dataset card whose ``configs`` point ``load_dataset(OUT, split="test")`` at
    ``data_files`` (a glob under ``out``), saying what one row is."""
    text = "\n".join([
        "---", "configs:", "- config_name: default", "  data_files:", "  - split: test", f"    path: {data_files}",
        "---", "", f"# {title}", "",
        f"`datasets.load_dataset(\"{Path(out).name}\", split=\"test\")` (the path of this folder) reads "
        f"`{data_files}`: {rows}. The tables are in `table.md`, the aggregates in `summary.json`, the settings in "
        "`eval_config.json`.", ""])
    path = Path(out) / CARD_FILE
    atomic_write_text(path, text)
    return path


def render_table(summary: Mapping[str, Any], *, metrics: Sequence[str] = MAIN_METRICS,
                 section: str = "overall", bold: bool = True) -> str:
    """The paper's Table 1 layout in Markdown: one block of rows per evaluation setting, one row per model, and
    for each dataset one column per metric (x 100). ``section`` picks another aggregate of each entry, such as
    ``by_bucket.answerable``. The best value of each column within a setting is bolded.

    Args:
        summary: an evaluation's summary (``EvalResult.summary``, :func:`load_summary`, :func:`compare_summaries`).
        metrics: the columns per dataset (default: answer, citation and joint F1).
        section: the aggregate of each entry to show.
        bold: bold the best value of each column within a setting.

    Returns:
        The table, in Markdown.

    Examples:
        ```python
        from rag_curriculum.evaluation import compare_summaries, render_table

        print(render_table(compare_summaries(["outputs/eval-musique", "outputs/eval-hotpotqa"])))
        ```
    """
    return md_table(*main_table(summary, metrics=metrics, section=section, bold=bold))


def main_table(summary: Mapping[str, Any], *, metrics: Sequence[str] = MAIN_METRICS, section: str = "overall",
               bold: bool = True, interval_sep: str | None = None,
               zero_mark: str | None = None) -> tuple[list[str], list[list[str]]]:
    """The header and rows of :func:`render_table` (best values wrapped in ``**``). With ``interval_sep`` (the
    overall section only), each value is followed by ``interval_sep`` and its 95% interval ``[low, high]``; with
    ``zero_mark``, a 0 that :func:`zero_notes` explains is followed by that mark."""
    evals = summary["evals"]
    idx = _index(evals)
    explained = {k for k, _ in zero_notes(summary, metrics=metrics, section=section)} if zero_mark else set()
    datasets = _dataset_order(e["dataset"] for e in evals)
    header = ["Eval setting", "Model"] + [f"{dataset_title(d)} {metric_title(m)}" for d in datasets for m in metrics]
    rows: list[list[str]] = []
    for setting in _setting_order(e["setting"] for e in evals):
        models = _models_at(evals, idx, setting, datasets)
        cells: list[list[str]] = []
        values: list[list[float | None]] = []
        for model in models:
            vals = []
            for d in datasets:
                agg = _section(idx.get((model, d, setting)), section)
                vals += [None if agg is None else agg.get(m) for m in metrics]
            values.append(vals)
            cells.append([pct(v) for v in vals])
        if bold:
            _bold_best(cells, values)
        for r, model in enumerate(models):
            for j, (d, m) in enumerate((d, m) for d in datasets for m in metrics):
                e = idx.get((model, d, setting))
                if e is None:
                    continue
                if zero_mark and (model, d, setting) in explained and values[r][j] == 0:
                    cells[r][j] += zero_mark
                ci = (e.get("intervals") or {}).get(m)
                if interval_sep is not None and section == "overall" and ci:
                    cells[r][j] += f"{interval_sep}[{pct(ci[0])}, {pct(ci[1])}]"
        for i, (model, row) in enumerate(zip(models, cells, strict=True)):
            rows.append([setting_title(setting) if i == 0 else "", model, *row])
    return header, rows


def _section(entry: Mapping[str, Any] | None, section: str) -> Mapping[str, Any] | None:
    node: Any = entry
    for part in section.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _wide_breakdown(summary: Mapping[str, Any], key: str, label: Callable | None = None,
                    metrics: Sequence[str] = MAIN_METRICS) -> list[str]:
    """One table per (dataset, setting): rows = models, columns = each group's metrics (Table 10's layout)."""
    out: list[str] = []
    evals = summary["evals"]
    idx = _index(evals)
    for setting in _setting_order(e["setting"] for e in evals):
        for d in _dataset_order(e["dataset"] for e in evals):
            entries = [(m, idx[(m, d, setting)]) for m in _models(evals) if (m, d, setting) in idx]
            groups: dict[str, None] = {}
            for _, e in entries:
                for g in e.get(key) or {}:
                    groups.setdefault(g, None)
            if not groups:
                continue
            groups = dict.fromkeys(sorted(groups, key=_natural))
            header = ["Model"] + [f"{label(g) if label else g} {metric_title(m)}" for g in groups for m in metrics]
            rows = []
            for model, e in entries:
                b = e.get(key) or {}
                rows.append([model] + [pct(b[g].get(m)) if g in b else "–" for g in groups for m in metrics])
            counts = ", ".join(f"{label(g) if label else g}: {_count_of(entries, key, g)}" for g in groups)
            out += [f"#### {dataset_title(d)}, {setting_title(setting).lower()} ({counts})", "", md_table(header, rows),
                    ""]
    return out


def _natural(key: str) -> tuple:
    """Sort numeric keys as numbers (JSON keys are strings: "10" after "9"), others after them by name."""
    return (0, int(key), "") if key.lstrip("-").isdigit() else (1, 0, key)


def _top_reasons(reasons: Mapping[str, int], k: int = 3) -> str:
    top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return ", ".join(f"{name} {n}" for name, n in top) or "–"


def _count_of(entries: Sequence[tuple[str, Mapping[str, Any]]], key: str, group: str) -> str:
    ns = {int(e[key][group]["n_questions"]) for _, e in entries if group in (e.get(key) or {})}
    return f"{ns.pop()} questions" if len(ns) == 1 else "/".join(str(n) for n in sorted(ns)) + " questions"


def _bucket_table(summary: Mapping[str, Any], buckets: Sequence[str]) -> str:
    """Table 4 / 9 layout: each cell is ``<first bucket> / <second bucket>``."""
    evals = summary["evals"]
    idx = _index(evals)
    datasets = _dataset_order(e["dataset"] for e in evals)
    header = ["Eval setting", "Model"] + [f"{dataset_title(d)} {metric_title(m)}" for d in datasets
                                          for m in MAIN_METRICS]
    rows = []
    for setting in _setting_order(e["setting"] for e in evals):
        models = _models_at(evals, idx, setting, datasets)
        for i, model in enumerate(models):
            row = [setting_title(setting) if i == 0 else "", model]
            for d in datasets:
                b = (idx.get((model, d, setting)) or {}).get("by_bucket") or {}
                for m in MAIN_METRICS:
                    row.append(" / ".join(pct(b[k][m]) if k in b else "–" for k in buckets))
            rows.append(row)
    sizes = []
    for setting in _setting_order(e["setting"] for e in evals):
        for d in datasets:
            b = next((e.get("by_bucket") for e in evals if (e["dataset"], e["setting"]) == (d, setting)
                      and e.get("by_bucket")), None)
            if b:
                sizes.append(f"{dataset_title(d)} {setting_title(setting).lower()} "
                             + " / ".join(str(b[k]["n_questions"]) if k in b else "0" for k in buckets))
    return md_table(header, rows) + ("\n\nQuestions per bucket: " + "; ".join(sizes) + "." if sizes else "")


def _details_table(summary: Mapping[str, Any]) -> str:
    header = ["Eval setting", "Dataset", "Model", "Questions", "m", "EM", "Citation P", "Citation R",
              "Joint F1 (per sample)", "Valid format", "Invalid: top reasons"]
    rows = []
    for setting, d, model, e in _cells(summary["evals"]):
        o = e["overall"]
        reasons = _top_reasons(e.get("format_reasons") or {})
        rows.append([setting_title(setting), dataset_title(d), model, e["n_questions"], e["m"],
                     pct(o["exact_match"]), pct(o["citation_precision"]), pct(o["citation_recall"]),
                     pct(o["joint_f1_per_sample"]), pct(o["format_valid"]), reasons])
    return md_table(header, rows)


def _by_level_table(summary: Mapping[str, Any]) -> str:
    header = ["Eval setting", "Dataset", "Level", "Model", "Questions", "Answer F1", "Citation F1", "Joint F1"]
    rows = []
    evals = summary["evals"]
    idx = _index(evals)
    for setting in _setting_order(e["setting"] for e in evals):
        for d in _dataset_order(e["dataset"] for e in evals):
            models = _models_at(evals, idx, setting, [d])
            levels: dict[str, None] = {}
            for m in models:
                for lv in idx[(m, d, setting)].get("by_level") or {}:
                    levels.setdefault(lv, None)
            for lv in sorted(levels, key=_natural):
                for m in models:
                    b = (idx[(m, d, setting)].get("by_level") or {}).get(lv)
                    if b is not None:
                        rows.append([setting_title(setting), dataset_title(d), lv, m, b["n_questions"],
                                     pct(b["answer_f1"]), pct(b["citation_f1"]), pct(b["joint_f1"])])
    return md_table(header, rows)


def _by_format_table(summary: Mapping[str, Any]) -> str:
    header = ["Eval setting", "Dataset", "Model", "Format", "Samples", "Questions", "Answer F1", "Citation F1",
              "Joint F1"]
    rows = []
    for setting, d, m, e in _cells(summary["evals"]):
        by_format = e.get("by_format") or {}
        for k, b in ((k, by_format[k]) for k in ("valid", "invalid") if k in by_format):
            rows.append([setting_title(setting), dataset_title(d), m, k, b["n_samples"], b["n_questions"],
                         pct(b["answer_f1"]), pct(b["citation_f1"]), pct(b["joint_f1"])])
    return md_table(header, rows)


def _bucket_names(summary: Mapping[str, Any]) -> list[str]:
    names: dict[str, None] = {}
    for e in summary["evals"]:
        for k in e.get("by_bucket") or {}:
            names.setdefault(k, None)
    order = ["answerable", "unanswerable"]
    return sorted(names, key=lambda k: (order.index(k) if k in order else len(order), k))


def render_report(summary: Mapping[str, Any], *, title: str = "Evaluation", plots: Sequence[str] = ()) -> str:
    """``table.md``: the main table (Table 1 layout), then the breakdowns and the plots.

    Args:
        summary: an evaluation's summary.
        title: the report's title.
        plots: the plots' paths (relative to where the report is written), shown at the end.

    Returns:
        The report, in Markdown.
    """
    s = summary.get("sampling") or {}
    lines = [f"# {title}", ""]
    if s:
        lines += [f"{s.get('n', '?')} samples per question (temperature {s.get('temperature')}, top-p "
                  f"{s.get('top_p')}, at most {s.get('max_tokens')} tokens, seed {s.get('seed')}); scores x 100. "
                  "Answer and citation F1 are averaged over the samples of each question, then over questions; "
                  "joint F1 is the harmonic mean of the two averages, as in the RAG-RL paper.", ""]
    notes = zero_notes(summary)
    lines += ["## Answer, citation and joint F1", "",
              md_table(*main_table(summary, zero_mark=ZERO_MARK if notes else None)), ""]
    lines += [f"{ZERO_MARK} {note}  " for _, note in notes]
    lines += [ZERO_WHY, ""] if notes else []
    if any(e.get("intervals") for e in summary["evals"]):
        lines += ["## 95% intervals", "", "Percentile bootstrap over questions (1,000 resamples, seed 0), x 100.", "",
                  _intervals_table(summary), ""]
    if (paired := paired_table(summary)) is not None:
        lines += ["## Paired differences", "", "Over the questions both sides scored, x 100, with a 95% paired "
                  "bootstrap interval (1,000 resamples of the questions, seed 0, the same resample for both sides): "
                  "an interval that holds 0 does not tell the two apart.", "", md_table(*paired), ""]
    for scorer in eval_scorers():  # a method's own section (CRAFT's trace formats: the CRAFT paper's Table 2)
        lines += scorer.report_section(summary) or []
    buckets = _bucket_names(summary)
    if buckets:
        lines += ["## Base-answerable / base-unanswerable questions", "",
                  f"Each cell: {' / '.join(buckets)} (buckets from the partition's statistics).", "",
                  _bucket_table(summary, buckets), ""]
    hops = _wide_breakdown(summary, "by_hops", label=lambda g: f"{g}-hop")
    if hops:
        lines += ["## By number of hops", "", *hops]
    if any(len(e.get("by_level") or {}) > 1 for e in summary["evals"]):  # evaluation sets usually have one level
        lines += ["## By difficulty level", "", "Level l of a row (its distractor count d = l + 2 - hops).", "",
                  _by_level_table(summary), ""]
    lines += outcome_sections(summary)
    lines += ["## By format validity", "", "Per sample: completions that keep the output format and those that do "
              "not (scored on what the parser could extract).", "", _by_format_table(summary), ""]
    lines += ["## More metrics", "", _details_table(summary), ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _intervals_table(summary: Mapping[str, Any]) -> str:
    """One row per (setting, model, dataset): each main metric with its bootstrap interval."""
    metrics = ("answer_f1", "citation_f1", "joint_f1")
    header = ["Eval setting", "Model", "Dataset", "Questions", *(metric_title(m) for m in metrics)]
    rows = []
    for e in summary["evals"]:
        ci = e.get("intervals") or {}
        cells = [f"{pct(e['overall'].get(m))} [{pct(ci[m][0])}, {pct(ci[m][1])}]" if m in ci
                 else pct(e["overall"].get(m)) for m in metrics]
        rows.append([setting_title(e["setting"]), e["model"], dataset_title(e["dataset"]), str(e.get("n_questions")),
                     *cells])
    return md_table(header, rows)


def load_summary(path: str | Path) -> dict[str, Any]:
    """A run's ``summary.json`` (``path`` is the file or the run directory).

    Args:
        path: ``summary.json``, or the ``--out`` directory of ``curriculum eval``.

    Returns:
        The summary: config, sampling, models and one entry per (model, dataset, setting) in ``evals``.

    Raises:
        FileNotFoundError: no summary there.
        ConfigError: a JSON file that is not an evaluation summary.
    """
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_FILE
    if not p.exists():
        raise FileNotFoundError(f"{p}: no evaluation summary here (is it the --out of `curriculum eval`?)")
    data = json.loads(p.read_text())
    if data.get("kind") != SUMMARY_KIND:
        raise ConfigError(f"{p}: not an evaluation summary (kind={data.get('kind')!r})")
    return data


def compare_summaries(paths: Sequence[str | Path], *, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Merge the summaries of several runs into one (same layout), so the tables above show them side by side.

    A model name that occurs in more than one run is prefixed with its run's name (``names``, else the run
    directory's name), so rows stay apart.

    Args:
        paths: the runs' ``--out`` directories (or their ``summary.json``).
        names: a name per run (None: each directory's name).

    Returns:
        One summary holding every run's entries, for :func:`render_table` and :func:`render_report`.

    Raises:
        ConfigError: another number of names than runs, or a file that is not an evaluation summary.
        FileNotFoundError: a run without a summary.
    """
    if names is not None and len(names) != len(paths):
        raise ConfigError(f"{len(paths)} runs but {len(names)} names")
    summaries = [load_summary(p) for p in paths]
    run_names = list(names) if names is not None else [_run_name(p) for p in paths]
    if len(set(run_names)) != len(run_names):
        run_names = [f"{n}#{i + 1}" for i, n in enumerate(run_names)]
    counts: dict[str, int] = {}
    for s in summaries:
        for m in {e["model"] for e in s["evals"]}:
            counts[m] = counts.get(m, 0) + 1
    evals = []
    for run, s in zip(run_names, summaries, strict=True):
        for e in s["evals"]:
            e = dict(e)
            e["run"] = run
            if counts[e["model"]] > 1:
                e["model"] = f"{run}/{e['model']}"
            evals.append(e)
    sampling = [s.get("sampling") for s in summaries]
    return {
        "kind": SUMMARY_KIND,
        "schema_version": SUMMARY_VERSION,
        "runs": [{"name": n, "path": str(p), "sampling": s.get("sampling")}
                 for n, p, s in zip(run_names, paths, summaries, strict=True)],
        "sampling": sampling[0] if all(x == sampling[0] for x in sampling) else None,
        "evals": evals,
    }


def paired_across_runs(merged: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The paired differences of a merged summary (:func:`compare_summaries`), read from each run's per-question
    results files (``results/MODEL/SET.parquet``, beside its summary): the pairs :func:`paired_comparisons` makes,
    now across runs too (a base model's run and a trained model's, evaluated on the same questions). Entries whose
    results file is gone are left out."""
    import pyarrow.parquet as pq

    where = {r["name"]: Path(r["path"]) for r in merged.get("runs") or []}
    items = []
    for e in merged["evals"]:
        run = where.get(e.get("run"))
        if run is None or not e.get("results"):
            continue
        base = run.parent if run.name == SUMMARY_FILE else run
        f = base / e["results"]
        if not f.exists():
            continue
        cols = [c for c in ("data_source", "id", "sample_answer_f1", "sample_citation_f1", "sample_exact_match")
                if c in pq.read_schema(f).names]
        items.append((e, pq.read_table(f, columns=cols).to_pylist()))
    return paired_comparisons(items)


def _run_name(path: str | Path) -> str:
    p = Path(path).resolve()
    return p.parent.name if p.name == SUMMARY_FILE else p.name

