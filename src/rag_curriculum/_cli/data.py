"""`curriculum inspect` (a source file or a shard directory) and `curriculum validate` (a shard directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pyarrow.parquet as pq
import typer
from rich.markup import escape
from rich.table import Table

from .._commit import is_toolkit_manifest
from ..cards import capped_levels_text
from ..difficulty import collapsed_levels, levels_as_built, shown_level
from ..errors import DataError, UsageError
from ..lengths import count_prompt_tokens, load_tokenizer
from ..loaders.stats import source_summary
from ..prompts import completion_prompt
from ..shards import (
    MANIFEST,
    ShardError,
    read_manifest,
    read_parquet_file,
    read_table,
    shard_files,
    sorted_keys,
    validate_shards,
)
from . import predictions
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


def print_shard_summary(directory: Path, manifest: dict[str, Any], *, capped: bool = True) -> None:
    """A shard directory's rows per level with what each level holds as built (distractors asked and shown,
    passages, rows short of distractors, hops), the levels that collapse, its shards and its manifest's records; a
    directory of questions without passages (Search-R1's files) is described by its sources, answers and prompt
    lengths instead. ``capped``: say which levels collapse (not after a build, whose log said it)."""
    names = pq.read_schema(shard_files(directory)[0]).names if manifest.get("shards") else []
    t = read_table(directory, columns=["level", "hops", "num_distractors", "data_source", "setting"], verify=False)
    lv = t.column("level").to_pylist()
    hops = t.column("hops").to_pylist()
    nd = t.column("num_distractors").to_pylist()
    title = f"{directory}  ({manifest.get('kind', '?')}, {manifest['num_rows']:,} rows)"
    if lv and not any(hops):  # questions only: no passages, no distractors, no hops to count
        _print_questions(directory, manifest, t, title, prompt_tokens="prompt_tokens" in names)
    else:
        _print_levels(manifest, t, lv, hops, nd, title, capped=capped)
    _print_files_and_records(directory, manifest)


def _print_levels(manifest: dict[str, Any], t: Any, lv: list[int], hops: list[int], nd: list[int],
                  title: str, *, capped: bool = True) -> None:
    """Rows per level, what each holds as built, and (a curriculum's rows) the levels that collapse."""
    curriculum = set(t.column("setting").to_pylist()) == {"curriculum"}
    built = levels_as_built(zip(lv, hops, nd, strict=True)) if curriculum else {}
    table = Table(title=title, title_justify="left", caption_justify="left",
                  caption="asked, shown: distractors per row (means), as the level asks and as built; passages: gold "
                          "+ shown; short: rows shown fewer than asked")
    for col in ("level", "rows", "index range", "asked", "shown", "passages", "short", "hops 2/3/4+"):
        table.add_column(col, justify="right")
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    by_level: dict[int, list[int]] = {}
    for i, x in enumerate(lv):
        first.setdefault(x, i)
        last[x] = i
        by_level.setdefault(x, []).append(i)
    for level in sorted(first):
        idx = by_level[level]
        h = [hops[i] for i in idx]
        b = built.get(level)
        shown = sum(nd[i] for i in idx) / len(idx)
        short = b["short_rows"] if b else 0
        table.add_row(str(level), f"{len(idx):,}", f"{first[level]}..{last[level]}",
                      f"{b['asked']:.2f}" if b else "-", f"{shown:.2f}",
                      f"{sum(nd[i] + hops[i] for i in idx) / len(idx):.2f}",
                      f"[yellow]{short:,}[/]" if short else "0",
                      f"{h.count(2)}/{h.count(3)}/{sum(1 for x in h if x >= 4)}")
    out.print(table)
    if curriculum and capped:
        sources = t.column("data_source").to_pylist()
        groups = []
        for name in sorted(set(sources)):
            rows = [(lv[i], hops[i], nd[i]) for i, s in enumerate(sources) if s == name]
            groups += [{"dataset": name, **g} for g in collapsed_levels(levels_as_built(rows))]
        if groups:
            source = ((manifest.get("capped_levels") or {}).get("distractors")
                      or (manifest.get("config") or {}).get("distractors") or "provided")
            text = capped_levels_text({"distractors": source, "groups": groups}, len(lv))
            out.print(f"[yellow]capped levels:[/] {escape(text)}", soft_wrap=True)


def _print_questions(directory: Path, manifest: dict[str, Any], t: Any, title: str, *, prompt_tokens: bool) -> None:
    """Rows of questions without passages (Search-R1's files): where they come from, their answers and their
    prompts' lengths (characters; tokens where the build counted them with --tokenizer)."""
    import pyarrow.compute as pc

    extra = read_table(directory, columns=["answers", "prompt", *(["prompt_tokens"] if prompt_tokens else [])],
                       verify=False)
    sources = t.column("data_source").to_pylist()
    answers = extra.column("answers").to_pylist()
    chars = [sum(len(m.get("content") or "") for m in p) for p in extra.column("prompt").to_pylist()]
    n = len(sources)
    table = Table(title=title + ": questions without passages", title_justify="left")
    for col in ("data_source", "rows", "share", "index range", "answers per row (mean)", "rows with aliases"):
        table.add_column(col, justify="left" if col == "data_source" else "right")
    first: dict[str, int] = {}
    rows_of: dict[str, list[int]] = {}
    for i, name in enumerate(sources):
        first.setdefault(name, i)
        rows_of.setdefault(name, []).append(i)
    for name in sorted(first, key=first.get):
        idx = rows_of[name]
        table.add_row(escape(str(name)), f"{len(idx):,}", f"{100 * len(idx) / n:.1f}%", f"{idx[0]}..{idx[-1]}",
                      f"{sum(len(answers[i] or []) for i in idx) / len(idx):.2f}",
                      f"{sum(1 for i in idx if len(answers[i] or []) > 1):,}")
    out.print(table)
    for s in manifest.get("sources") or []:
        out.print(f"input: {escape(str(s.get('input') or s.get('hub')))} ({s.get('dataset')}, "
                  f"{s.get('records_loaded', '?')} records)")
    no_answer = sum(1 for a in answers if not a)
    out.print(f"answers: {sum(len(a or []) for a in answers):,} for {n:,} questions"
              + (f", [yellow]{no_answer:,} without one[/]" if no_answer else "")
              + (f"; e.g. {escape(repr(answers[0][:3]))}" if answers and answers[0] else ""))
    out.print(f"prompt length (characters of its messages): min {min(chars):,}, mean {sum(chars) / n:,.0f}, "
              f"max {max(chars):,}")
    if prompt_tokens:
        tok = extra.column("prompt_tokens")
        pt = manifest.get("prompt_tokens") or {}
        out.print(f"prompt length (tokens{', ' + escape(str(pt['tokenizer'])) if pt.get('tokenizer') else ''}): "
                  f"min {pc.min(tok).as_py():,}, mean {pc.mean(tok).as_py():,.1f}, max {pc.max(tok).as_py():,}")
    levels = sorted(set(t.column("level").to_pylist()))
    out.print(f"levels: {', '.join(map(str, levels))} (no passages: a search agent retrieves them; `curriculum "
              f"inspect {escape(str(directory))} --row 0` shows a prompt)")


def _print_files_and_records(directory: Path, manifest: dict[str, Any]) -> None:
    """The shard files, and what the manifest records of distractors, unanswerable rows, tail and leakage."""
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


def read_row(directory: Path, manifest: dict[str, Any], n: int) -> dict[str, Any]:
    """Row ``n`` (curriculum order) of a shard directory, reading only the shard that holds it."""
    total = int(manifest.get("num_rows", 0))
    if not 0 <= n < total:
        raise UsageError(f"--row {n}: {directory} has {total:,} rows" + (f" (0..{total - 1:,})" if total else ""),
                         hint="rows are numbered by curriculum_index, from 0; `curriculum inspect "
                              f"{directory}` shows the index range of each level")
    start = 0
    for f in shard_files(directory):
        rows = pq.read_metadata(f).num_rows
        if n < start + rows:
            return read_parquet_file(f).slice(n - start, 1).to_pylist()[0]
        start += rows
    raise ShardError(f"--row {n}: the shards of {directory} hold {start:,} rows, its manifest says {total:,}")


def print_row(directory: Path, manifest: dict[str, Any], n: int, *, as_json: bool = False,
              tokenizer: str | None = None) -> None:
    """``inspect --row N``: the row's prompt as the model sees it (its messages, role by role; with ``tokenizer``
    the text its chat template makes, generation prompt included, as the trainers render it), after a line of what
    the row is (id, level, what it holds as built, answers)."""
    r = read_row(directory, manifest, n)
    messages = [{"role": m["role"], "content": m["content"]} for m in r["prompt"]]
    hops, d, level = r.get("hops") or 0, r.get("num_distractors") or 0, r.get("level")
    about = {"curriculum_index": r.get("curriculum_index", n), "id": r.get("id"), "data_source": r.get("data_source"),
             "level": level, "hops": hops, "num_distractors": d, "answers": r.get("answers"),
             "gold_labels": r.get("gold_labels"), "template": r.get("template")}
    if hops and level is not None and r.get("setting") == "curriculum":
        about["shows_level"] = shown_level(level, hops, d)
    rendered = None
    if tokenizer is not None:
        tok = load_tokenizer(tokenizer)
        rendered = (tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                    if getattr(tok, "chat_template", None) else completion_prompt(messages).text)
        about["tokenizer"] = tokenizer
        about["prompt_tokens"] = count_prompt_tokens(tok, [messages])[0]  # as the build's prompt_tokens counts
    if as_json:
        typer.echo(json.dumps({**about, "messages": messages, **({"rendered": rendered} if rendered else {})},
                              indent=2, ensure_ascii=False))
        return
    what = (f"level {level}, {hops} gold + {d} distractor passages" if hops
            else f"level {level}, no passages (a search agent retrieves them)")
    if about.get("shows_level") not in (None, level):
        what += f" [yellow](capped: shows what level {about['shows_level']} shows)[/]"
    out.print(f"[bold]row {about['curriculum_index']}[/] of {escape(str(directory))}: {escape(str(about['id']))} "
              f"({escape(str(about['data_source']))}; {what}); answers {escape(repr(about['answers']))}",
              soft_wrap=True)
    if rendered is not None:
        how = "chat template" if getattr(tok, "chat_template", None) else "completion-style prompt (no chat template)"
        out.rule(f"{escape(tokenizer)}'s {how}: {about['prompt_tokens']:,} tokens")
        out.print(rendered, markup=False, highlight=False, soft_wrap=True, end="")
        return
    for m in messages:
        out.rule(escape(m["role"]))
        out.print(m["content"], markup=False, highlight=False, soft_wrap=True)


def inspect(
    path: Annotated[Path, typer.Argument(help="A source data file, or a shard directory made by `curriculum build`.")],
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Dataset of a source file "
                                                "\\[default: sniffed from the file]", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")] = False,
    on_error: Annotated[str, typer.Option(help="raise | skip bad records (skips are counted).")] = "raise",
    row: Annotated[int | None, typer.Option(
        "--row", min=0, help="Print row N of a shard directory (its curriculum_index) as the model sees it: its "
        "prompt messages as text (with --json: as JSON).", show_default=False)] = None,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="With --row: the prompt as this tokenizer's chat template renders it for the model (a "
        "Hub id or a local folder), and its length in tokens.", show_default=False)] = None,
    n: Annotated[int, typer.Option(
        "--n", min=1, help="An evaluation's or a partition's output: how many questions to show.")] = 5,
    where: Annotated[list[str] | None, typer.Option(
        "--where", help="An evaluation's or a partition's output: show only questions where KEY=VALUE, KEY!=VALUE "
        "or KEY<NUMBER (<=, >, >=) holds, e.g. model=trained, answer_f1<0.5, bucket=answerable, level=3 "
        "(repeatable: all must hold).", show_default=False)] = None,
) -> None:
    """Summarise a source file (records, hops, question types, paragraphs and distractors per question, repeated
    titles, skipped records) or a shard directory (levels, with the distractors and passages each holds as built,
    hops, sizes; Search-R1's questions: their sources, answers and prompt lengths); --row N prints one row as the
    model sees it. The output of `curriculum eval` or `curriculum partition`: the first --n questions' predictions
    next to their gold answers and scores (--where filters them).

    [bold]Examples[/]

      curriculum inspect outputs/hotpotqa-linear

      curriculum inspect outputs/hotpotqa-linear --row 95

      curriculum inspect outputs/hotpotqa-linear --row 95 --tokenizer Qwen/Qwen2.5-3B-Instruct

      curriculum inspect outputs/eval-cpu --n 3 --where model=trained --where "answer_f1<0.5"
    """
    if on_error not in ("raise", "skip"):
        fail(f"--on-error must be raise or skip, got {on_error!r}", code=EXIT_USAGE)
    if tokenizer is not None and row is None:
        fail("--tokenizer renders one row: give --row N too", code=EXIT_USAGE)
    if row is not None and not path.is_dir():
        fail(f"--row reads a shard directory; {path} is not one",
             "pass a folder made by `curriculum build` or `curriculum partition`", code=EXIT_USAGE)
    if (kind := predictions.kind_of(path)) is not None and row is None:  # predictions next to gold answers
        with reported_errors():
            predictions.print_predictions(path, kind, n=n, where=where, as_json=as_json)
        return
    if where:
        fail("--where filters the questions of an evaluation's or a partition's output", "drop --where",
             code=EXIT_USAGE)
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
            if row is not None:
                print_row(path, manifest, row, as_json=as_json, tokenizer=tokenizer)
            elif as_json:
                out.print_json(json.dumps(sorted_keys(manifest)))  # levels as numbers, in a manifest of any age
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
    quick: Annotated[bool, typer.Option("--quick", help=(
        "An index: check its files' sizes and counts only, not their contents (seconds at any size).")
    )] = False,
    full: Annotated[bool, typer.Option("--full", help=(
        "An index: rank every stored ranking again (by default every one of an index of up to 2,000 questions, "
        "an even sample of 2,000 above that).")
    )] = False,
) -> None:
    """Check a shard directory: manifest present and complete, every shard's content hash, row counts and the row
    schema; or an index made by curriculum index: every file's SHA-256 against its manifest, the passages' digest
    and the content fingerprint recomputed, the passages' keys, the BM25 postings decoded whole, the counts, the
    stored rankings ranked again (every one of an index of up to 2,000 questions, an even sample above; --full:
    every one) (--quick: the sizes and counts only). Exits 1 when anything is wrong."""
    what = "give a shard directory made by `curriculum build` or `curriculum partition`"
    if not directory.exists():
        fail(f"{directory}: not found", what)
    if not directory.is_dir():
        fail(f"{directory}: not a directory", what)
    index_files = [n for n in INDEX_FILES if (directory / n).exists()]
    rebuild = (f"build the index again into a new --out (curriculum index ...): without a readable {MANIFEST}, "
               "--overwrite cannot tell its files from others" if index_files else
               "build the directory again (curriculum build / partition)")
    if not (directory / MANIFEST).exists() and index_files:
        fail(f"{directory}: holds an index's files ({', '.join(index_files)}) but no {MANIFEST}: its writing did "
             "not finish, or the manifest was removed", rebuild)
    if not (directory / MANIFEST).exists() and not any(directory.glob("part-*.parquet")) and not any(
            directory.glob("data/part-*.parquet")):
        fail(f"{directory}: not a shard directory (no {MANIFEST})", what)
    kind, problem = _manifest_state(directory / MANIFEST)
    if problem is not None:
        fail(problem, rebuild)
    if kind in ("index", "bm25-index"):  # an index of `curriculum index`: its own checks, not a shard directory's
        _validate_index(directory, quick, full)
        return
    if full:
        fail("--full is for an index of curriculum index; a shard directory's check reads every shard already",
             "drop --full", code=EXIT_USAGE)
    if quick:
        fail("--quick is for an index of curriculum index; a shard directory's check reads every shard",
             "drop --quick", code=EXIT_USAGE)
    with reported_errors(lambda e: "rebuild the directory (an interrupted build never leaves a valid one)"
                         if isinstance(e, ShardError) else None):
        m = validate_shards(directory)
    out.print(f"[green]valid[/]: {directory} ({m['num_rows']:,} rows in {len(m['shards'])} shard(s), "
              f"schema v{m['schema_version']})")


#: Files every index of `curriculum index` holds (how a folder whose manifest is gone is still told for one).
INDEX_FILES = ("passages.bin", "ranked_ids.npy")


def _manifest_state(path: Path) -> tuple[str | None, str | None]:
    """The kind a manifest names, or why it names none (a damaged or foreign file); (None, None) when absent (an
    older shard directory's layout is validated without one)."""
    if not path.exists():
        return None, None
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"{path}: cannot be read as JSON ({type(e).__name__}: {e}): it is damaged"
    if not isinstance(m, dict) or not isinstance(m.get("kind"), str):
        return None, (f"{path}: names no kind (neither a shard directory's nor an index's manifest): it is damaged, "
                      "or this toolkit did not write it")
    return m["kind"], None


def _validate_index(directory: Path, quick: bool = False, full: bool = False) -> None:
    """``curriculum validate`` on an index: every file's SHA-256 against its manifest, the passages' digest, their
    keys and the fingerprint recomputed, the counts, the kind's own reading of its files (the BM25 postings decoded
    whole; a dense index's vectors: all finite; its encoder's files), the stored rankings ranked again (every one
    up to 2,000 questions, a sample above; ``full``: every one); ``quick``: sizes and counts only."""
    from rag_retriever import get_kind, load_index  # an index is rag-retriever's: it is there

    with reported_errors(lambda e: "build it again with curriculum index ... --overwrite"):
        idx = load_index(directory, check="sizes" if quick else "full")
        done = {} if quick else idx.verify(rerank=None) if full else idx.verify()
        m = idx.manifest
    kind = get_kind(m["retriever"]).title()
    head = (f"a {kind} index: {m['passages']:,} passages, {m['questions']:,} questions ranked to depth "
            f"{m['depth']}")
    if quick:
        out.print(f"[green]valid[/] (sizes only, --quick): {directory} ({head}; every file there with the size its "
                  "manifest records; contents not read: curriculum validate without --quick hashes them)",
                  soft_wrap=True)
        return
    size = sum(r["bytes"] for r in m["files"].values())
    ranked = (f"all {done['reranked']:,} stored rankings ranked again" if done["reranked"] >= done["questions"] else
              f"{done['reranked']:,} of {done['questions']:,} stored rankings ranked again (an even sample: --full "
              "ranks every one)")
    out.print(f"[green]valid[/]: {directory} ({head}; every file's SHA-256 matches its manifest ({len(m['files'])} "
              f"files, {size / 1e6:,.1f} MB), the passages' digest, their {done['keys']:,} keys and the fingerprint "
              f"{done['fingerprint'][:16]}... recomputed, {ranked})", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
    app.command("validate")(validate)
