"""`curriculum inspect OUT` on an evaluation's or a partition's output: a few questions' predictions next to their
gold answers and scores (a rich table), filtered with ``--where``.

    curriculum inspect outputs/eval-cpu --n 5 --where model=trained --where "answer_f1<0.5"
    curriculum inspect outputs/hotpotqa-partition --where bucket=answerable
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import DataError, UsageError
from ..shards import MANIFEST, read_parquet_file, read_rows
from .common import out

#: What makes a folder one these views read.
EVAL_SUMMARY = "summary.json"
PARTITION_RECORD = "partition.json"
PARTITION_STATS = "stats.parquet"

_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge, "!=": operator.ne,
                                                   "<": operator.lt, ">": operator.gt, "=": operator.eq}
_WHERE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|!=|<|>|=)\s*(.*?)\s*$")


def kind_of(path: Path) -> str | None:
    """``"eval"`` for the ``--out`` of `curriculum eval`, ``"partition"`` for that of `curriculum partition`, None
    for anything else."""
    if not path.is_dir():
        return None
    if (path / EVAL_SUMMARY).exists() and (path / "results").is_dir():
        return "eval"
    if (path / PARTITION_RECORD).exists() and (path / PARTITION_STATS).exists():
        return "partition"
    return None


def parse_where(items: Sequence[str] | None) -> list[tuple[str, str, str]]:
    """``--where`` filters: ``KEY=VALUE``, ``KEY!=VALUE``, ``KEY<NUMBER`` (``<=``, ``>``, ``>=``)."""
    got = []
    for item in items or []:
        m = _WHERE.match(item)
        if not m or not m.group(3):
            raise UsageError(f"--where {item!r}: expected KEY=VALUE, KEY!=VALUE or KEY<NUMBER (<=, >, >=)",
                             hint="e.g. --where model=trained --where 'answer_f1<0.5' --where bucket=answerable")
        got.append((m.group(1), m.group(2), m.group(3)))
    return got


def _matches(row: Mapping[str, Any], key: str, op: str, value: str) -> bool:
    v = row.get(key)
    if op in ("=", "!="):
        same = _text(v).lower() == value.lower()
        return same if op == "=" else not same
    try:
        return v is not None and _OPS[op](float(v), float(value))
    except (TypeError, ValueError):
        raise UsageError(f"--where {key}{op}{value}: {key} is {v!r}, not a number",
                         hint=f"compare {key} with = or !=") from None


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "" if v is None else str(v)


def select(rows: Sequence[Mapping[str, Any]], where: Sequence[tuple[str, str, str]], n: int) -> list[Mapping]:
    """The first ``n`` rows that pass every filter; a key no row has is refused, naming the keys there are."""
    keys = sorted({k for r in rows for k in r})
    for key, _, _ in where:
        if key not in keys:
            raise UsageError(f"--where {key}: no such field here", hint="fields: " + ", ".join(keys))
    kept = [r for r in rows if all(_matches(r, *w) for w in where)]
    return kept[:n]


def _score(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * float(x):.1f}"


def _answers(xs: Sequence[Any] | None) -> str:
    return " | ".join(str(x) for x in xs or []) or "–"


def eval_rows(path: Path) -> list[dict[str, Any]]:
    """Every question of every results file of an evaluation, in the summary's order, flattened for filtering:
    the question's columns (model, id, data_source, setting, level, hops, bucket, answer_f1, ...), ``set``
    (dataset-setting), ``valid`` (samples in the output format) and ``reasons`` (the others' reasons)."""
    summary = json.loads((path / EVAL_SUMMARY).read_text(encoding="utf-8"))
    rows = []
    for e in summary.get("evals") or []:
        f = path / e["results"]
        if not f.exists():
            raise DataError(f"{f}: the results file {EVAL_SUMMARY} names is not there",
                            hint="run the same `curriculum eval` command again: it re-scores what it finds")
        for r in read_parquet_file(f).to_pylist():
            valid = r.get("sample_valid") or []
            r["set"] = f"{r.get('data_source')}-{r.get('setting')}"
            r["valid"] = sum(1 for v in valid if v)
            r["reasons"] = ", ".join(sorted({x for x, v in zip(r.get("sample_reason") or [], valid, strict=False)
                                             if not v and x}))
            r.pop("completions", None)  # long: the results files keep them
            rows.append(r)
    return rows


def partition_rows(path: Path) -> list[dict[str, Any]]:
    """Every question of a partition's ``stats.parquet`` with its question and gold answers, read from the input
    rows the run recorded (``partition.json``'s ``input.path``, relative to the folder) or, when they are gone, from
    the bucket folders."""
    record = json.loads((path / PARTITION_RECORD).read_text(encoding="utf-8"))
    stats = read_parquet_file(path / PARTITION_STATS).to_pylist()
    source = (record.get("input") or {}).get("path")
    found: dict[str, dict[str, Any]] = {}
    dirs = [path / source] if source else []
    dirs += [d for d in sorted(path.iterdir()) if d.is_dir() and (d / MANIFEST).exists() and d.name != "work"]
    for d in dirs:
        if (d / MANIFEST).exists():
            for r in read_rows(d):
                found.setdefault(str(r.get("id")), r)
    rows = []
    for s in stats:
        r = found.get(str(s.get("id"))) or {}
        rows.append({**s, "question": r.get("question"), "answers": r.get("answers")})
    return rows


def print_predictions(path: Path, kind: str, *, n: int, where: Sequence[str] | None, as_json: bool) -> None:
    """The first ``n`` questions of ``path`` that pass ``where``: predictions next to the gold answers and scores."""
    filters = parse_where(where)
    rows = eval_rows(path) if kind == "eval" else partition_rows(path)
    shown = select(rows, filters, n)
    if as_json:
        keep = ("model", "set", "id", "question", "answers", "sample_answer", "answer_f1", "citation_f1",
                "sample_valid", "sample_reason", "base_predictions", "sample_f1", "c", "n", "bucket")
        typer.echo(json.dumps([{k: r[k] for k in keep if k in r} for r in shown], indent=2, ensure_ascii=False))
        return
    what = "an evaluation" if kind == "eval" else "a partition"
    title = (f"{escape(str(path))} ({what}): {len(shown)} of {len(rows):,} question(s)"
             + (f" where {escape(' and '.join(''.join(w) for w in filters))}" if filters else ""))
    table = Table(title=title, title_justify="left", show_lines=True, header_style="bold")
    if kind == "eval":
        for col, just in (("model · set", "left"), ("question", "left"), ("gold", "left"),
                          ("predictions (one per sample)", "left"), ("answer F1", "right"),
                          ("citation F1", "right"), ("format", "left")):
            table.add_column(col, justify=just, overflow="fold")
        for r in shown:
            cited = "; ".join(", ".join(c) or "none" for c in r.get("sample_citations") or [])
            fmt = f"{r['valid']}/{r.get('m') or len(r.get('sample_valid') or [])} valid"
            if r["reasons"]:
                fmt += f" ({r['reasons']})"
            table.add_row(escape(f"{r.get('model')} · {r['set']}"), escape(str(r.get("question") or "")),
                          escape(_answers(r.get("answers"))),
                          escape(_answers(r.get("sample_answer"))) + f"\n[dim]cited: {escape(cited)}[/]",
                          _score(r.get("answer_f1")), _score(r.get("citation_f1")), escape(fmt))
        caption = "scores x 100, averaged over the samples; `--json` gives the rows, results/*/*.parquet the completions"
    else:
        for col, just in (("id", "left"), ("question", "left"), ("gold", "left"),
                          ("predictions (one per sample)", "left"), ("answer F1 per sample", "right"),
                          ("c / k", "right"), ("bucket", "left")):
            table.add_column(col, justify=just, overflow="fold")
        for r in shown:
            f1 = " ".join(_score(x) for x in r.get("sample_f1") or []) or "–"
            table.add_row(escape(str(r.get("id"))), escape(str(r.get("question") or "–")),
                          escape(_answers(r.get("answers"))), escape(_answers(r.get("base_predictions"))), f1,
                          f"{r.get('c')}/{r.get('n')}" if r.get("n") is not None else "–",
                          escape(str(r.get("bucket") or r.get("skipped") or "–")))
        caption = "answer F1 x 100; stats.parquet holds every question (--keep-completions: the raw completions)"
    table.caption = caption
    table.caption_justify = "left"
    out.print(table)
    if not shown:
        out.print("[yellow]no question matches[/]" + (" the --where filters" if filters else ""))
