"""`curriculum inspect` (a source file or a shard directory) and `curriculum validate` (a shard directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .._commit import is_toolkit_manifest
from ..errors import DataError
from ..loaders.stats import source_summary
from ..retrieval import get_kind, load_index
from ..shards import MANIFEST, ShardError, read_manifest, read_table, validate_shards
from .common import EXIT_USAGE, data_error_hint, fail, out, reported_errors


def _dist_table(title: str, dist: dict[str, int], key: str) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column(key, justify="right")
    t.add_column("questions", justify="right")
    t.add_column("share", justify="right")
    total = sum(dist.values()) or 1
    for k, v in dist.items():
        t.add_row(k, f"{v:,}", f"{100 * v / total:.1f}%")
    return t


def print_source_summary(s: dict[str, Any]) -> None:
    head = Table(title=f"{s['path']}", title_justify="left", show_header=False)
    head.add_column(style="bold")
    head.add_column()
    for k in ("dataset", "split", "records", "questions_with_aliases", "questions_with_repeated_titles",
              "questions_with_repeated_gold_titles", "supporting_facts_sentence_out_of_range",
              "supporting_facts_ambiguous", "unanswerable", "duplicate_records"):
        head.add_row(k.replace("_", " "), f"{s[k]:,}" if isinstance(s[k], int) else str(s[k]))
    skipped = sum(s["skipped"].values())
    head.add_row("skipped records", ", ".join(f"{k}: {v}" for k, v in s["skipped"].items()) if skipped else "0")
    out.print(head)
    out.print(_dist_table("hops (gold paragraphs)", s["hops"], "hops"))
    out.print(_dist_table("question types", s["question_types"], "type"))
    out.print(_dist_table("paragraphs per question", s["paragraphs_per_question"], "paragraphs"))
    out.print(_dist_table("distractors available per question (k)", s["distractors_per_question"], "k"))


def _print_origins(record: dict[str, Any]) -> None:
    t = Table(title=f"passage origins ({record['source']}, index {record['index']['path']})", title_justify="left")
    for col in ("passage", "origin", "count"):
        t.add_column(col, justify="right" if col == "count" else "left")
    for k, v in record["origins"].items():
        t.add_row(*k.split(":"), f"{v:,}")
    out.print(t)
    if record.get("excluded"):
        out.print("ranked passages skipped: " + ", ".join(f"{k} {v:,}" for k, v in record["excluded"].items()))
    if record.get("gold_recall"):
        gr = record["gold_recall"]
        out.print(f"gold recall@{record.get('top_k')}: mean {gr['mean']}; all {gr['all']:,} / some {gr['some']:,} / "
                  f"none {gr['none']:,} rows; distribution " + ", ".join(f"{k}: {v}" for k, v in
                                                                         gr["distribution"].items()))


def print_shard_summary(directory: Path, manifest: dict[str, Any]) -> None:
    import pyarrow.compute as pc

    t = read_table(directory, columns=["level", "hops", "num_distractors", "data_source"], verify=False)
    levels = t.column("level")
    table = Table(title=f"{directory}  ({manifest.get('kind', '?')}, {manifest['num_rows']:,} rows)",
                  title_justify="left")
    for col, just in (("level", "right"), ("rows", "right"), ("index range", "right"), ("distractors (mean)", "right"),
                      ("hops 2/3/4+", "right")):
        table.add_column(col, justify=just)
    lv = levels.to_pylist()
    hops = t.column("hops").to_pylist()
    nd = t.column("num_distractors").to_pylist()
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, x in enumerate(lv):
        first.setdefault(x, i)
        last[x] = i
    for level in sorted(first):
        mask = pc.equal(levels, level)
        rows = pc.sum(mask).as_py()
        idx = [i for i, x in enumerate(lv) if x == level]
        h = [hops[i] for i in idx]
        table.add_row(str(level), f"{rows:,}", f"{first[level]}..{last[level]}",
                      f"{sum(nd[i] for i in idx) / rows:.2f}",
                      f"{h.count(2)}/{h.count(3)}/{sum(1 for x in h if x >= 4)}")
    out.print(table)
    files = Table(title="shards", title_justify="left")
    files.add_column("file")
    files.add_column("rows", justify="right")
    files.add_column("size", justify="right")
    files.add_column("sha256")
    for s in manifest["shards"]:
        files.add_row(s["file"], f"{s['rows']:,}", f"{s['bytes'] / 1e6:.2f} MB", s["sha256"][:16])
    out.print(files)
    if manifest.get("distractors"):
        _print_origins(manifest["distractors"])
    u = manifest.get("unanswerable")
    if u:
        style = "yellow" if u["short_rows"] or u.get("answer_in_passages") else "green"
        out.print(f"[{style}]unanswerable rows:[/] {u['unanswerable_rows']:,} of {manifest['num_rows']:,} (answer "
                  f"{u['abstention_answer']!r}); {u['short_rows']:,} short of distractors ({u['missing_passages']:,} "
                  f"passages fewer), {u.get('answer_in_passages', 0):,} showing a passage that names the answer")
    tail = manifest.get("trainer_tail")
    if tail:
        style = "yellow" if tail["unseen_rows"] else "green"
        out.print(f"[{style}]trainer tail:[/] with {tail['batch_prompts']} prompts per step, {tail['steps']} steps; "
                  f"{tail['unseen_rows']} row(s) never seen")
    lk = manifest.get("leakage")
    if lk:
        out.print(f"leakage vs {len(lk['eval_sets'])} eval set(s): {lk['by_id']} by id, {lk['by_question']} by "
                  f"question ({lk['policy']})")




def inspect(
    path: Annotated[Path, typer.Argument(help="A source data file, or a shard directory made by `curriculum build`.")],
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Dataset of a source file "
                                                "\\[default: sniffed from the file]", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")] = False,
    on_error: Annotated[str, typer.Option(help="raise | skip bad records (skips are counted).")] = "raise",
) -> None:
    """Summarise a source file (records, hops, question types, paragraphs and distractors per question, repeated
    titles, skipped records) or a shard directory (levels, hops, distractors, sizes)."""
    if on_error not in ("raise", "skip"):
        fail(f"--on-error must be raise or skip, got {on_error!r}", code=EXIT_USAGE)
    if path.is_dir():
        if not (path / MANIFEST).exists():
            fail(f"{path} is a directory without {MANIFEST}",
                 "pass one source data file (JSON, JSONL or Parquet), or a finished build output")
        with reported_errors(lambda e: f"build it again; `curriculum validate {path}` lists what is wrong"):
            manifest = read_manifest(path)
            if manifest.get("kind") in ("index", "bm25-index"):
                raise ShardError(f"{path} is an index (made by `curriculum index`), not a shard directory",
                                 hint=f"`curriculum validate {path}` checks it")
            if not is_toolkit_manifest(manifest):
                raise ShardError(f"{path}/{MANIFEST} is not a shard manifest of this toolkit (no toolkit name, "
                                 "kind, schema_version and shard list)")
            if as_json:
                out.print_json(json.dumps(manifest))
            else:
                try:
                    print_shard_summary(path, manifest)
                except Exception:
                    validate_shards(path)  # names the shard that is wrong (a truncated file, a changed hash)
                    raise
        return

    def hint(e: BaseException) -> str | None:
        if isinstance(e, DataError) and e.record is not None and on_error == "skip" and "truncated" not in str(e):
            return None  # --on-error skip given already
        return data_error_hint(e)  # the file as a whole: skipping records cannot help

    with reported_errors(hint):
        s = source_summary(path, dataset, on_error=on_error)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
    else:
        print_source_summary(s)


def validate(
    directory: Annotated[Path, typer.Argument(help="A shard directory made by `curriculum build` or `partition`, "
                                              "or an index made by `curriculum index`.")],
) -> None:
    """Check a shard directory: manifest present and complete, every shard's content hash, row counts and the row
    schema; or an index made by curriculum index: its files and counts against its manifest. Exits 1 when anything is wrong."""
    what = "give a shard directory made by `curriculum build` or `curriculum partition`"
    if not directory.exists():
        fail(f"{directory}: not found", what)
    if not directory.is_dir():
        fail(f"{directory}: not a directory", what)
    if not (directory / MANIFEST).exists() and not any(directory.glob("part-*.parquet")) and not any(
            directory.glob("data/part-*.parquet")):
        fail(f"{directory}: not a shard directory (no {MANIFEST})", what)
    kind = _manifest_kind(directory / MANIFEST)
    if kind in ("index", "bm25-index"):  # an index of `curriculum index`: its own checks, not a shard directory's
        _validate_index(directory)
        return
    with reported_errors(lambda e: "rebuild the directory (an interrupted build never leaves a valid one)"
                         if isinstance(e, ShardError) else None):
        m = validate_shards(directory)
    out.print(f"[green]valid[/]: {directory} ({m['num_rows']:,} rows in {len(m['shards'])} shard(s), "
              f"schema v{m['schema_version']})")


def _manifest_kind(path: Path) -> str | None:
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m.get("kind") if isinstance(m, dict) and isinstance(m.get("kind"), str) else None


def _validate_index(directory: Path) -> None:
    """``curriculum validate`` on an index: its manifest, and its files and counts against it (what a build checks
    when it loads the index)."""
    with reported_errors(lambda e: "build it again with curriculum index ... --overwrite"):
        idx = load_index(directory)
        m = idx.manifest
    kind = get_kind(m["retriever"]).title()
    out.print(f"[green]valid[/]: {directory} (a {kind} index: {m['passages']:,} passages, {m['questions']:,} "
              f"questions ranked to depth {m['depth']}; files and counts match its manifest)")


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
    app.command("validate")(validate)
