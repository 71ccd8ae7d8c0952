"""The evaluation loop: every model over every evaluation set, generation resumable, scores recomputed each run.

For each (model, evaluation set) the ``m`` completions per question are generated in chunks (a finished chunk is
flushed to ``work/`` atomically and skipped on restart), then scored into ``results/<model>/<dataset>-<setting>
.parquet``, which keeps the completions and a fingerprint of what made them (model, backend, sampling, rows).
A rerun of the same command reuses those completions and only re-scores (cheap), so a changed scorer, partition
statistics or ``strict_format`` never needs generation again; a changed generation setting is refused unless
``overwrite``. The summary, the Markdown report and the plots are then written from the results.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._commit import check_resumable, resumable_output
from .._plumbing import (
    atomic_write_text,
    atomic_write_with,
    mask_secrets,
    redact_command,
    shards_digest,
    stats_set_problem,
)
from ..errors import EvalError
from ..generation import (
    BackendSpec,
    EngineConfig,
    GenerationBackend,
    SamplingConfig,
    backend_identity,
    open_engine,
    runner,
)
from ..generation.runner import read_backend
from ..models import model_settings
from ..rewards import ABSTENTION_ANSWER
from ..shards import read_manifest, read_table, shareable, write_json
from ._config import EvalConfig, ModelSpec
from ._plots import write_plots
from ._report import (
    SUMMARY_FILE,
    SUMMARY_KIND,
    SUMMARY_VERSION,
    paired_comparisons,
    render_report,
    summarize_entry,
    write_dataset_card,
)
from ._scoring import SAMPLE_METRICS, eval_scorers, score_row, scorer_of

log = logging.getLogger(__name__)

__all__ = ["RESULT_SCHEMA", "EvalResult", "EvalSet", "generate_completions", "load_buckets",
           "load_eval_sets", "read_results", "run_eval"]

EVAL_SETTINGS = ("distractor", "ideal", "retrieved")
SKIPPED_TOO_LONG = "prompt_too_long"
RESULTS_META_KEY = b"rag_curriculum.eval"

#: The rows of the row shards that results keep (the question's identity and its breakdown keys).
_ROW_COLUMNS = ("id", "source_id", "data_source", "setting", "question", "answers", "gold_labels", "hops", "level",
                "num_distractors", "qtype", "curriculum_index", "template", "prompt", "passages", "extra_info",
                "answerable", "gold_recall")
#: What the paired differences read of a question's record.
_PAIRED = ("data_source", "id", "sample_answer_f1", "sample_citation_f1", "sample_exact_match")
_KEPT = ("id", "source_id", "data_source", "setting", "question", "answers", "gold_labels", "hops", "level",
         "num_distractors", "qtype", "curriculum_index", "template", "answerable", "gold_recall")

#: Per-question results: one row per question, with its completions, parsed samples and scores.
RESULT_SCHEMA = pa.schema([
    ("model", pa.string()),
    ("id", pa.string()), ("source_id", pa.string()), ("data_source", pa.string()), ("setting", pa.string()),
    ("question", pa.string()), ("answers", pa.list_(pa.string())), ("gold_labels", pa.list_(pa.string())),
    ("hops", pa.int32()), ("level", pa.int32()), ("num_distractors", pa.int32()), ("qtype", pa.string()),
    ("curriculum_index", pa.int64()), ("template", pa.string()),
    ("answerable", pa.bool_()), ("gold_recall", pa.float64()),  # unanswerable rows; the retrieved setting
    ("bucket", pa.string()),
    ("skipped", pa.string()),
    ("m", pa.int32()),
    ("answer_f1", pa.float64()), ("exact_match", pa.float64()), ("citation_precision", pa.float64()),
    ("citation_recall", pa.float64()), ("citation_f1", pa.float64()), ("joint_f1_per_sample", pa.float64()),
    ("format_valid", pa.float64()),
    ("completions", pa.list_(pa.string())),
    ("sample_answer", pa.list_(pa.string())), ("sample_citations", pa.list_(pa.list_(pa.string()))),
    ("sample_valid", pa.list_(pa.bool_())), ("sample_reason", pa.list_(pa.string())),
    ("sample_abstained", pa.list_(pa.bool_())),
    *[(f"sample_{k}", pa.list_(pa.float64())) for k in SAMPLE_METRICS],
])


@dataclass
class EvalSet:
    """The rows of one dataset in one evaluation shard directory."""

    directory: Path
    dataset: str
    setting: str
    rows: list[dict[str, Any]]
    manifest: dict[str, Any] = field(repr=False, default_factory=dict)
    template: str | None = None  # the output format the rows were re-rendered in (`eval --template`), if any

    @property
    def key(self) -> str:
        key = f"{self.dataset}-{self.setting}"
        return f"{key}-{self.template}" if self.template else key

    @property
    def abstention_answer(self) -> str:
        """The final answer that abstains on this set: the build's (its manifest), else the default."""
        return (self.manifest.get("config") or {}).get("abstention_answer") or ABSTENTION_ANSWER

    def fingerprint(self) -> str:
        """The shards' content and the evaluated rows' ids (a work directory is reused only when it matches)."""
        ids = json.dumps([r["id"] for r in self.rows])
        if self.template:  # re-rendered rows: their prompts too
            ids += json.dumps([r["prompt"] for r in self.rows], sort_keys=True)
        return shards_digest(self.manifest, ids)


@dataclass
class EvalResult:
    """What :func:`run_eval` wrote.

    Attributes:
        out: the output folder.
        summary: ``summary.json``: the config, the sampling, and one entry per (model, dataset, setting) in
            ``evals``, each with ``overall``, ``by_hops``, ``by_level``, ... metrics.
        generated: questions generated in this run (0 when everything was reused).
    """

    out: Path
    summary: dict[str, Any]
    generated: int  # questions generated in this run (0 when everything was reused)


def _manifest_setting(manifest: Mapping[str, Any]) -> str | None:
    return manifest.get("kind") or (manifest.get("config") or {}).get("setting")


def load_eval_sets(directory: str | Path, *, limit: int | None = None, verify: bool = True) -> list[EvalSet]:
    """The evaluation sets of a shard directory: one per dataset it holds (a mixture gives several); the
    setting comes from the manifest (``kind``) and the rows' ``setting`` column, which must agree."""
    d = Path(directory)
    manifest = read_manifest(d)
    setting = _manifest_setting(manifest)
    if setting not in EVAL_SETTINGS:
        raise EvalError(f"{d} is not an evaluation set (kind={setting!r}); build one with "
                        "`curriculum build --setting distractor|ideal|retrieved`")
    table = read_table(d, verify=verify)
    cols = [c for c in _ROW_COLUMNS if c in table.schema.names]
    rows = table.select(cols).to_pylist()
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("setting") not in (None, setting):
            raise EvalError(f"{d}: row {r['id']} has setting {r['setting']!r} but the manifest says {setting!r}")
        by_dataset.setdefault(r["data_source"], []).append(r)
    sets = []
    for dataset, rs in by_dataset.items():
        ids = [r["id"] for r in rs]
        if len(set(ids)) != len(ids):
            raise EvalError(f"{d}: repeated row ids in {dataset}")
        sets.append(EvalSet(d, dataset, setting, rs[:limit] if limit else rs, manifest))
    if not sets:
        raise EvalError(f"{d}: no rows")
    return sets


def load_buckets(paths: Sequence[str | Path]) -> dict[tuple[str | None, str, str], str]:
    """Base-answerable / base-unanswerable buckets from partition statistics (``stats.parquet``, or a partition
    directory holding one): ``(setting or None, data_source, source_id) -> bucket``.

    Questions partitioned as an evaluation set (their ``setting`` is ``distractor`` or ``ideal``, as in the
    paper, which partitions each evaluation set on its own) are keyed by that setting; others (a ``curriculum``
    build of the dev split) by None, which applies to every setting."""
    out: dict[tuple[str | None, str, str], str] = {}
    for p in paths:
        p = Path(p)
        f = p / "stats.parquet" if p.is_dir() else p
        if not p.exists():
            raise EvalError(f"{p}: no such file or directory", hint="--stats takes a partition's stats.parquet or "
                            "its --out directory")
        if (problem := stats_set_problem(p)) is not None:
            raise EvalError(problem)
        if not f.exists():
            raise EvalError(f"{p}: no partition statistics (stats.parquet) here")
        table = pq.read_table(f)
        names = set(table.schema.names)
        if "bucket" not in names:
            raise EvalError(f"{f}: no `bucket` column (is it a partition's stats.parquet?)")
        if not {"data_source", "source_id"} <= names:
            raise EvalError(f"{f}: needs `data_source` and `source_id` columns to match evaluation rows")
        cols = ["data_source", "source_id", "bucket"] + (["setting"] if "setting" in names else [])
        for r in table.select(cols).to_pylist():
            if r["bucket"] is None:
                continue
            setting = r.get("setting") if r.get("setting") in EVAL_SETTINGS else None
            key = (setting, r["data_source"], str(r["source_id"]))
            if key in out and out[key] != r["bucket"]:
                raise EvalError(f"{f}: {key[1]} question {key[2]} is in bucket {r['bucket']!r} here but "
                                f"{out[key]!r} in an earlier statistics file")
            out[key] = r["bucket"]
    return out


def _bucket_of(buckets: Mapping[tuple[str | None, str, str], str], row: Mapping[str, Any]) -> str | None:
    sid = str(row.get("source_id"))
    return buckets.get((row.get("setting"), row["data_source"], sid)) or buckets.get((None, row["data_source"], sid))


def _generation_fingerprint(model: ModelSpec, cfg: EvalConfig, sampling: SamplingConfig, es: EvalSet) -> dict:
    """What the completions depend on: the backend's identity (every option that can change a completion, with
    defaults filled in, secrets left out, a digest of a local model's files), sampling, the rows, the chunking."""
    return {"model": model.path, "backend": cfg.backend,
            "generation": backend_identity(cfg.backend, model.path, cfg.backend_args),
            "sampling": sampling.to_dict(), "data": es.fingerprint(), "chunk_size": cfg.chunk_size}


def read_results(path: str | Path) -> tuple[pa.Table, dict[str, Any]]:
    """A per-question results file and its metadata (what made it)."""
    pf = pq.ParquetFile(path)
    meta = json.loads((pf.schema_arrow.metadata or {}).get(RESULTS_META_KEY, b"{}"))
    return pf.read(), meta


def _write_results(path: Path, records: list[dict[str, Any]], meta: dict[str, Any],
                   schema: pa.Schema = RESULT_SCHEMA) -> None:
    table = pa.Table.from_pylist(records, schema=schema)
    table = table.replace_schema_metadata({RESULTS_META_KEY: json.dumps(meta, sort_keys=True).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(path, lambda tmp: pq.write_table(table, tmp, compression="zstd", compression_level=3))


class _KeepOpen:
    """The model's backend as the runner sees it: the runner closes what its factory made after each evaluation
    set, but one model serves every set, so this closes nothing; :func:`run_eval` closes the backend itself."""

    def __init__(self, backend: GenerationBackend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        if name == "_backend":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


def generate_completions(es: EvalSet, work: Path, backend: Callable[[], GenerationBackend], sampling: SamplingConfig, *,
             fingerprint: Mapping[str, Any], chunk_size: int, overwrite: bool, progress: bool,
             description: str, allow_identical_samples: bool = False) -> tuple[list[list[str] | None], int]:
    """The ``sampling.n`` completions of every question of ``es`` (None for a prompt the model cannot take),
    and how many questions were generated now (the others were done by an earlier, interrupted run).

    Made with :func:`rag_curriculum.generation.runner.run_chunks`: resumable chunks in ``work``, a seed per
    question. ``backend`` is called only when something is left to generate. A work directory left by a run
    with other settings is refused, or discarded with ``overwrite``."""
    ids = [r["id"] for r in es.rows]
    prompts = [list(r["prompt"]) for r in es.rows]
    kw: dict[str, Any] = dict(ids=ids, prompts=prompts, backend=backend, sampling=sampling, fingerprint=fingerprint,
                              chunk_size=chunk_size, progress=progress, description=description,
                              allow_identical_samples=allow_identical_samples)
    try:
        report = runner.run_chunks(work, **kw)
    except runner.RunMismatchError:
        if not overwrite:
            raise
        report = runner.run_chunks(work, overwrite=True, **kw)
    if not report.complete:  # pragma: no cover - only with max_chunks / shards, which eval does not use
        raise EvalError(f"{work}: generation did not finish ({len(report.remaining)} chunks left); run again")
    table = runner.read_completions(work, ids=ids)
    return table.column("completions").to_pylist(), report.generated_questions


def _score(es: EvalSet, model: ModelSpec, completions: Sequence[Sequence[str] | None], *, m: int,
           strict_format: bool, buckets: Mapping) -> list[dict[str, Any]]:
    """Score every question; a question the model could not take (prompt too long) scores as ``m`` empty
    completions, i.e. 0, and is marked ``skipped``."""
    if buckets and not any(_bucket_of(buckets, {**r, "setting": r.get("setting") or es.setting}) for r in es.rows):
        have = sorted({k[0] or "any" for k in buckets if k[1] == es.dataset})
        log.warning("%s: no question is in the partition statistics given (%s settings of %s): partition this "
                    "set too for the base-answerable breakdown",
                    es.key, ", ".join(have) or "no", es.dataset)
    records = []
    for row, comps in zip(es.rows, completions, strict=True):
        rec = {"model": model.name, **{k: row.get(k) for k in _KEPT}}
        rec["setting"] = rec.get("setting") or es.setting
        rec["bucket"] = _bucket_of(buckets, rec) if buckets else None
        rec["skipped"] = None if comps is not None else SKIPPED_TOO_LONG
        rec.update(score_row(row, list(comps) if comps is not None else [""] * m, strict_format=strict_format,
                             abstention_answer=es.abstention_answer))
        records.append(rec)
    return records


def _stored_completions(path: Path, fingerprint: Mapping[str, Any], es: EvalSet, *,
                        overwrite: bool) -> list[list[str] | None] | None:
    """Completions of an earlier run, when it made them the same way; None when there are none to reuse."""
    if not path.exists():
        return None
    table, meta = read_results(path)

    fingerprint = mask_secrets(fingerprint)  # as it was recorded
    if meta.get("generation") == json.loads(json.dumps(fingerprint, sort_keys=True)):
        skipped = table.column("skipped").to_pylist()
        by_id = {i: (None if sk else c) for i, c, sk in zip(table.column("id").to_pylist(),
                                                            table.column("completions").to_pylist(), skipped,
                                                            strict=True)}
        if all(r["id"] in by_id for r in es.rows):
            return [by_id[r["id"]] for r in es.rows]
    if overwrite:
        log.info("%s: made with other settings; generating again (--overwrite)", path)
        return None
    diff = sorted(k for k in set(fingerprint) | set(meta.get("generation") or {})
                  if (meta.get("generation") or {}).get(k) != json.loads(json.dumps(fingerprint.get(k))))
    raise EvalError(f"{path} was made with other generation settings (differs in: {', '.join(diff) or '?'}); "
                    "pass --overwrite to generate again, or choose another --out")


def run_eval(cfg: EvalConfig, *, progress: bool = False, command: str | None = None,
             backend_factory: Callable[[ModelSpec], GenerationBackend] | None = None,
             engine: EngineConfig | None = None) -> EvalResult:
    """Evaluate every model of ``cfg`` on every evaluation set; write results, summary, report and plots.

    ``curriculum eval`` calls this. Completions already generated under ``cfg.out`` with the same settings are
    reused, so a finished run is re-reported without loading any model.

    Args:
        cfg: the evaluation's settings (models, evaluation sets, backend, samples ``m``, ``out``, ...).
        progress: show progress bars.
        command: the command line recorded in ``summary.json`` (secrets masked).
        backend_factory: ``backend_factory(model)`` builds the backend of a model (default:
            ``get_backend(cfg.backend, model=model.path, **cfg.backend_args)``); it is called only for a model
            that has something left to generate.
        engine: where generation runs (None: this process; ``EngineConfig(engine="ray")``: a pool of Ray actors
            per model, each loading the model once, with the same results).

    Returns:
        The output folder, its summary and how many questions this run generated.

    Raises:
        ConfigError: settings that cannot be used (no model or evaluation set, two models of one name, an
            unknown backend or template).
        EvalError: ``cfg.out`` is not an evaluation's output or another run holds its lock, a ``--data`` folder
            that is not an evaluation set, two folders of the same dataset and setting, ``--stats`` that are not a
            partition's, or results made with other generation settings (without ``overwrite``).
        ShardError: an evaluation set whose shards do not match its manifest.
        GenerationError: a backend that cannot generate as asked (a :class:`PromptTooLongError` for prompts
            longer than the model's context, an :class:`EngineError` from the Ray engine).

    Examples:
        ```python
        from rag_curriculum import EvalConfig, run_eval
        from rag_curriculum.evaluation import ModelSpec

        cfg = EvalConfig(models=[ModelSpec.parse("min-max=outputs/train/rag-rl-musique-min-max")],
                         data=["eval/musique-distractor", "eval/musique-ideal"], backend="vllm", m=3,
                         out="outputs/eval-musique")
        result = run_eval(cfg, progress=True)
        result.summary["evals"][0]["overall"]["joint_f1"]
        ```
    """
    cfg.validate()
    if engine is not None:
        engine.validate(cfg.backend, cfg.backend_args)
    out = Path(cfg.out)
    check_eval_out(out)
    # a run that failed before its first result leaves no OUT
    started = lambda: (out / "results").exists() or any((out / "work").rglob("chunk-*.parquet"))  # noqa: E731
    with resumable_output(out, EVAL_LOCK, "eval", EvalError, started=started), open_engine(engine) as eng:
        return _run_eval(cfg, progress=progress, command=command, backend_factory=backend_factory, engine=eng)


#: Held in OUT while an evaluation runs (filelock; the agent evaluation's too): a second run is refused at once.
EVAL_LOCK = ".eval.lock"


def check_eval_out(out: Path) -> None:
    """``--out`` is a new or empty folder, or one an evaluation wrote (``eval_config.json``, ``summary.json``,
    ``results/`` or ``work/``), with or without ``--overwrite``: results land beside the toolkit's own files only."""
    check_resumable(out, written=lambda d, entries: bool(set(entries) & {"eval_config.json", SUMMARY_FILE, "results",
                                                                         "work"}),
                    what="the output of an evaluation (no eval_config.json)", error=EvalError, ignore=(EVAL_LOCK,))


def _run_eval(cfg: EvalConfig, *, progress: bool, command: str | None,
              backend_factory: Callable[[ModelSpec], GenerationBackend] | None, engine: Any) -> EvalResult:
    out = Path(cfg.out)
    sampling = SamplingConfig(n=cfg.m, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                              seed=cfg.seed)
    sets, judge = _eval_sets(cfg, out)
    buckets = load_buckets(cfg.stats) if cfg.stats else {}
    out.mkdir(parents=True, exist_ok=True)
    command = redact_command(command)  # the one rule for secrets, in every file written here
    write_json(out / "eval_config.json", shareable(mask_secrets({"config": cfg.to_dict(), "command": command})))
    def factory_of(m: ModelSpec) -> Callable[[], GenerationBackend]:  # picklable: Ray workers build it
        base = partial(backend_factory, m) if backend_factory else BackendSpec(cfg.backend, m.path, cfg.backend_args)
        return engine.wrap(base, backend=cfg.backend, options=cfg.backend_args)

    entries: list[dict[str, Any]] = []
    scores: list[list[dict[str, Any]]] = []  # each entry's per-question scores, for the paired differences
    generated = 0
    for model in cfg.models:
        loaded: list[GenerationBackend] = []

        def backend(model: ModelSpec = model, loaded: list = loaded) -> GenerationBackend:
            if not loaded:
                log.info("loading %s (%s) with the %s backend", model.name, model.path, cfg.backend)
                loaded.append(factory_of(model)())
            return _KeepOpen(loaded[0])

        try:
            for es in sets:
                entry, n, records = _evaluate_set(cfg, model, es, backend, sampling, judge=judge,
                                                  buckets=buckets, progress=progress)
                entries.append(entry)
                scores.append([{k: r.get(k) for k in _PAIRED} for r in records])
                generated += n
        finally:
            if loaded and hasattr(loaded[0], "close"):
                loaded[0].close()
    _remove_empty(out / "work")
    paired = paired_comparisons(list(zip(entries, scores, strict=True)))
    return EvalResult(out, _write_summary(cfg, command, sampling, entries, paired), generated)


def _eval_sets(cfg: EvalConfig, out: Path) -> tuple[list[EvalSet], Any]:
    """The evaluation sets of ``cfg.data`` (each in every template asked for) and the CRAFT judge, refused before
    anything is written when the judge has no CRAFT set to audit or two sets would write the same results."""
    sets: list[EvalSet] = []
    for d in cfg.data:
        sets += load_eval_sets(d, limit=cfg.limit)
    scorers = eval_scorers()
    if cfg.templates:  # every set in every template asked for (a method's formats: CRAFT's variants)
        render = next((s for s in scorers if getattr(s, "rerender", None)), None)
        if render is None:
            raise EvalError("--template re-renders sets in a method's formats, and no method that does is "
                            "installed", hint="install rag-curriculum's methods (CRAFT's formats), or leave out "
                            "--template")
        sets = [render.rerender(es, t, cfg.index_base) for es in sets for t in cfg.templates]
    judge = next((j for s in scorers if (j := s.make_judge(cfg.judge, cfg.judge_args,
                                                           default_cache=str(out / "judge-cache"))) is not None), None)
    if judge is not None and not any(s.variant_of(es) for s in scorers for es in sets):
        raise EvalError("--judge audits a method's traces (CRAFT's), and no evaluation set here is in its format",
                        hint="add --template craft-v1 (... craft-v4), or evaluate sets built with --template craft-vN")
    keys = [s.key for s in sets]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise EvalError(f"two --data directories hold the same dataset and setting {dup}; evaluate them in "
                        "separate runs (separate --out) and put them side by side with `curriculum eval compare`")
    return sets, judge


def _evaluate_set(cfg: EvalConfig, model: ModelSpec, es: EvalSet, backend: Callable[[], GenerationBackend],
                  sampling: SamplingConfig, *, judge: Any, buckets: Mapping[Any, str], progress: bool
                  ) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """One model on one evaluation set: its completions (generated, resumed, or the stored results' when their
    fingerprint matches), scored and written to ``results/MODEL/SET.parquet``; the summary's entry and how many
    completions were generated, and the per-question records."""
    out = Path(cfg.out)
    rel = Path("results") / model.name / f"{es.key}.parquet"
    path = out / rel
    fp = _generation_fingerprint(model, cfg, sampling, es)
    work = out / "work" / model.name / es.key
    completions = _stored_completions(path, fp, es, overwrite=cfg.overwrite)
    n = 0
    if completions is None:
        completions, n = generate_completions(
            es, work, backend, sampling, fingerprint=fp, chunk_size=cfg.chunk_size,
            overwrite=cfg.overwrite, progress=progress, description=f"{model.name} · {es.key}",
            allow_identical_samples=cfg.allow_identical_samples)
        resolved = read_backend(work)  # the engine's settings as resolved (per-platform choices)
    else:
        resolved = read_results(path)[1].get("backend")
    records = _score(es, model, completions, m=cfg.m, strict_format=cfg.strict_format, buckets=buckets)
    scorer, variant = scorer_of(es)
    if scorer is not None:
        records = scorer.add_scores(records, es.rows, variant, judge, strict_format=cfg.strict_format)
    meta = {"generation": fp, "model": model.name, "strict_format": cfg.strict_format,
            "data_dir": str(es.directory)}
    if resolved is not None:
        meta["backend"] = resolved
    _write_results(path, records, mask_secrets(meta),
                   scorer.result_schema(RESULT_SCHEMA, records) if scorer is not None else RESULT_SCHEMA)
    shutil.rmtree(work, ignore_errors=True)
    entry = summarize_entry(records, model=model.name, model_path=model.path, model_settings=model_settings(model.path),
                            dataset=es.dataset,
                            setting=es.setting, data_dir=str(es.directory), results=rel.as_posix())
    if scorer is not None:
        scorer.entry(entry, records, variant, model=model.name, renamed=len(cfg.templates) > 1)
    o = entry["overall"]
    log.info("%s on %s: answer F1 %.2f, citation F1 %.2f, joint F1 %.2f, valid format %.1f%%",
             model.name, es.key, 100 * o["answer_f1"], 100 * o["citation_f1"], 100 * o["joint_f1"],
             100 * o["format_valid"])
    return entry, n, records


def _write_summary(cfg: EvalConfig, command: str | None, sampling: SamplingConfig,
                   entries: list[dict[str, Any]], paired: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``summary.json`` (written after the plots it names), ``table.md`` and the results' dataset card."""
    out = Path(cfg.out)
    summary = {
        "kind": SUMMARY_KIND,
        "schema_version": SUMMARY_VERSION,
        "command": command,
        "config": mask_secrets(cfg.to_dict()),
        "sampling": sampling.to_dict(),
        "models": [{"name": m.name, "path": m.path} for m in cfg.models],
        "evals": entries,
    }
    if paired:  # two models, or two settings, over the same questions
        summary["paired"] = paired
    summary = shareable(summary)  # shared with the results: no folder of this machine (its paths as typed here)
    plots: list[Path] = write_plots(summary, out / "plots") if cfg.plots else []
    summary["plots"] = [p.relative_to(out).as_posix() for p in plots]
    write_json(out / SUMMARY_FILE, summary)
    report = render_report(summary, plots=summary["plots"])
    atomic_write_text(out / "table.md", report)
    write_dataset_card(out, data_files="results/*/*.parquet", title="Evaluation results",
                       rows="one row per model and question (model, id, data_source, setting, question, answers, "
                            "the m completions, each sample's answer and scores, and their means)")
    return summary


def _remove_empty(d: Path) -> None:
    if not d.is_dir():
        return
    for p in sorted(d.rglob("*"), key=lambda p: -len(p.parts)):
        if p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    if not any(d.iterdir()):
        d.rmdir()
