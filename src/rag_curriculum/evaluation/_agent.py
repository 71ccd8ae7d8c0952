"""Evaluation of search agents (``curriculum eval --agent search-r1 --retriever DIR|URL``): each model answers each
question of each set ``m`` times through the search environment (:func:`rag_curriculum.agents.run_rollouts`), and
is scored the way the agentic papers report it: exact match and F1 of the final ``<answer>`` (SQuAD normalisation,
the best over the gold aliases, averaged over the ``m`` samples), plus what only a search agent has: searches per
question, gold recall of what was retrieved (the share of a question's gold passages that any of its searches
returned, and the share of trajectories that saw one), format errors by type and how trajectories ended (answer,
turn budget, context budget, format error), with the same breakdowns as the closed-context evaluation (hops, level,
answerable).

The methods add their parts by name (:mod:`rag_curriculum.agents`' registries; the evaluation names no method):
``--agent NAME`` is an agent protocol of :data:`~rag_curriculum.agents.AGENT_PROTOCOLS` (its prompt, its turn format
through the same loop and its scores of each set, in the entry under its key: ``--agent react --best-of N`` adds
ReAct+CRAG's, and the table three rows per model), ``--reward NAME`` a reward of
:data:`~rag_curriculum.agents.TRAJECTORY_REWARDS` that scores every trajectory beside EM / F1, ``--faithfulness
NAME`` a measure of :data:`~rag_curriculum.agents.FAITHFULNESS_MEASURES`.

Outputs in ``out``: ``results/MODEL/SET.json`` (per set: the scores and the fingerprint of what made them, written
atomically when the set is done: a rerun of the same command reuses it, another setting is refused without
``--overwrite``), ``trajectories/MODEL/SET.jsonl`` (every trajectory: segments, queries, passage ids, gold flags,
errors), ``summary.json``, ``table.md`` (EM / F1 per dataset, models as rows) and ``eval_config.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rag_plumbing import passage_hash

from .._commit import check_resumable, resumable_output
from .._metrics import answer_scores
from .._plots import bar_panels
from .._plumbing import (
    atomic_write_bytes,
    atomic_write_text,
    mask_secrets,
    maybe_progress,
    redact_command,
    renamed_keywords,
)
from .._settings import (
    check_model_ref,
    check_settings,
    retriever_retries_rule,
    retriever_rule,
    retriever_timeout_rule,
    rule,
)
from ..agents import (
    AGENT_PROTOCOLS,
    FAITHFULNESS_MEASURES,
    TRAJECTORY_REWARDS,
    AgentEvalPart,
    AgentSetRun,
    RolloutConfig,
    agent_protocol_names,
    open_retriever,
    run_rollouts,
)
from ..errors import EvalError, UsageError
from ..generation import SamplingConfig, get_backend
from ..loaders import is_search_r1_file, load_flashrag, load_search_r1
from ..shards import read_table, write_json
from ._config import ModelSpec, public_backend_args
from ._report import write_dataset_card

log = logging.getLogger(__name__)

LOCK = ".eval.lock"  # held while a run writes (filelock): a second run on the same --out is refused at once


@renamed_keywords()
@dataclass
class AgentEvalConfig:
    """Everything that determines a search-agent evaluation. Saved as ``eval_config.json`` in ``out``."""

    agent: str = rule("search-r1", choices=agent_protocol_names, help=(
        "The agent protocol: search-r1 (Search-R1's tags) | react (ReAct's Thought / Action / Observation)."))
    retriever: str | None = retriever_rule()
    retriever_timeout: float = retriever_timeout_rule()
    retriever_retries: int = retriever_retries_rule()
    models: list[ModelSpec] = rule(default_factory=list, flag="--model", help="Models: PATH or NAME=PATH.")
    data: list[str] = rule(default_factory=list, flag="--data", help=(
        "Shard directories whose questions are asked (evaluation sets or curricula: question, answers and gold "
        "passages are read from the rows), or FlashRAG question files (FILE.jsonl: id, question, golden_answers; "
        "no gold passages, so no gold recall)."))
    out: str = rule("outputs/eval-agent", empty=False, help="Output directory.")
    backend: str = rule("vllm", empty=False, help="Generation backend: vllm | openai | transformers | scripted.")
    backend_args: dict[str, Any] = rule(default_factory=dict, flag="--backend-arg", help="Other backend options.")
    template: str = rule("search-r1", empty=False, help=(
        "The agent's prompt: search-r1 | search-r1-original; with --agent react, react (its default), a template "
        "registered for ReAct, or a copy of ReAct's prompts_naive.json (its few-shot prompt, exactly)."))
    m: int = rule(1, ge=1, le=64, flag="--samples", help="Trajectories per question, averaged.")
    temperature: float = rule(1.0, ge=0, le=100, help="Sampling temperature (explicit, never the model's).")
    top_p: float = rule(1.0, gt=0, le=1, help="Nucleus sampling top-p.")
    max_tokens: int = rule(500, ge=1, le=1_000_000, help="Most tokens per model turn (Search-R1: 500).")
    top_k: int = rule(3, ge=1, le=100, renamed_from="topk", help="Passages per search (Search-R1: 3).")
    max_turns: int = rule(4, ge=1, le=64, help="Model turns per trajectory, the answering one included.")
    max_context_tokens: int = rule(8192, ge=1, le=10_000_000, help=(
        "Prompt plus trajectory, in the backend's tokens (characters / 4 for a backend without a tokenizer)."))
    seed: int = rule(0, ge=0, le=2**63 - 1, help="Sampling seed.")
    limit: int | None = rule(None, ge=1, le=10_000_000, help="Ask only the first N questions of each set.")
    overwrite: bool = rule(False, help="Evaluate again where out holds results made with other settings.")
    best_of: int | None = rule(None, ge=1, le=64, help=(
        "ReAct+CRAG: N trajectories per question, ranked by the CRAG-inspired consistency score (best-of-N) and "
        "voted (self-consistency), beside the mean of the N (the ReAct baseline); sets --samples N."))
    crag_weights: dict[str, float] = rule(default_factory=dict, flag="--crag-weight", help=(
        "Weights of the consistency score's terms, KEY=VALUE: agreement, thought_action, loops, contradiction, "
        "early, errors (default 1 each)."))
    react_sentences: int = rule(5, ge=1, le=1000, flag="", help=(
        "Sentences of the page a ReAct Search shows (the paper: the first 5)."))
    faithfulness: str | None = rule(None, empty=False, help=(
        "Score the trajectories' faithfulness: veritas (Info-Think and Think-Search by --judge, Think-Answer by "
        "regex; a table in the layout of VERITAS's Table 6 in veritas.md, the judge pairs in pairs/)."))
    judge: str | None = rule(None, empty=False, help=(
        "VERITAS's judge as BACKEND:MODEL (e.g. openai:veritas-rm behind vllm serve, the paper's distilled reward "
        "model); without it only Think-Answer is scored."))
    reward: str | None = rule(None, choices=TRAJECTORY_REWARDS.names, help=(
        "Also score every trajectory with this reward, reported beside EM / F1: search-r1 (Search-R1's own "
        "qa_em on the decoded prompt plus trajectory, bit for bit: its extraction, normalisation and format score)."))
    reward_args: dict[str, Any] = rule(default_factory=dict, flag="--reward-arg", help=(
        "The reward's options, KEY=VALUE: for search-r1, format_score (default 0.0) and score (1.0)."))
    plots: bool = rule(True, help="Write PNG plots into plots/ (scores per set, how trajectories ended).")
    judge_args: dict[str, Any] = rule(default_factory=dict, flag="--judge-arg", help=(
        "VERITAS options KEY=VALUE: the judge's (votes, vote, temperature, max_tokens, cache_dir, ...), the "
        "reward's (think_answer_scope, aggregate, judge_failure_value, missing_value, ...); any other key goes to "
        "the judge's backend (base_url, api_key, ...)."))

    def __post_init__(self) -> None:
        check_settings(self)
        self.models = [m if isinstance(m, ModelSpec) else ModelSpec.parse(str(m)) for m in self.models]

    def validate(self) -> None:
        self.__post_init__()
        if not self.models:
            raise UsageError("no model given: pass --model PATH (or NAME=PATH)")
        if not self.data:
            raise UsageError("no questions given: pass --data DIR (a shard directory), once per set")
        if not self.retriever:
            raise UsageError("--agent needs --retriever: an index directory or a server URL",
                             hint="curriculum index ... --out DIR, then --retriever DIR (or curriculum serve)")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise UsageError(f"two models share a name in {names}; name them apart with --model NAME=PATH")
        self._check_parts()
        self.rollout()  # its own checks (template, budgets)
        for m in self.models:  # a mistyped path stops here, not deep inside the model loader
            check_model_ref(m.path, backend=self.backend, label=f"model {m.name}", loads=True)

    def _check_parts(self) -> None:
        """Every registered part's checks (the agent protocols', the rewards', the faithfulness measures'), each
        refusing its own settings given without it."""
        for part in AGENT_PROTOCOLS.loaded().values():
            part.check(self)
        if self.reward is None and self.reward_args:
            raise UsageError("--reward-arg sets an option of --reward: pass --reward "
                             + " or ".join(TRAJECTORY_REWARDS.names()))
        for part in TRAJECTORY_REWARDS.loaded().values():
            part.check(self)
        known = FAITHFULNESS_MEASURES.names()
        if self.faithfulness is not None and self.faithfulness not in known:
            raise UsageError(f"--faithfulness {self.faithfulness!r} is not known; known: {', '.join(known)}")
        for part in FAITHFULNESS_MEASURES.loaded().values():
            part.check(self)

    def parts(self) -> list[AgentEvalPart]:
        """The parts this run uses, in the order they score a set: its agent protocol, its faithfulness measure
        (``--faithfulness``), its reward (``--reward``)."""
        return [AGENT_PROTOCOLS.get(self.agent),
                *([FAITHFULNESS_MEASURES.get(self.faithfulness)] if self.faithfulness is not None else []),
                *([TRAJECTORY_REWARDS.get(self.reward)] if self.reward is not None else [])]

    def agent_template(self) -> str:
        """The prompt template: the agent protocol's (:meth:`~rag_curriculum.agents.AgentEvalPart.template`:
        ``--template`` for Search-R1's tags)."""
        return AGENT_PROTOCOLS.get(self.agent).template(self)

    def fmt(self) -> Any:
        """The rollout loop's turn format (None: Search-R1's)."""
        return AGENT_PROTOCOLS.get(self.agent).turn_format(self)

    def rollout(self) -> Any:
        return RolloutConfig(template=self.agent_template(), top_k=self.top_k, max_turns=self.max_turns,
                             max_context_tokens=self.max_context_tokens, seed=self.seed)

    def sampling(self) -> Any:
        return SamplingConfig(n=1, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                              seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = [f"{m.name}={m.path}" for m in self.models]
        d["backend_args"] = public_backend_args(self.backend_args, mask=True)
        d["judge_args"] = public_backend_args(self.judge_args, mask=True)
        return mask_secrets(d)  # a retriever or model URL's credentials, in every file that records the config


_COLUMNS = ("id", "data_source", "question", "answers", "passages", "hops", "level", "answerable", "reward_model")


def load_question_sets(directory: str | Path, *, limit: int | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """(dataset, rows) per dataset of a shard directory, in row order; or the one set of a FlashRAG question file
    (:func:`~rag_curriculum.loaders.load_flashrag`: evaluation only, no gold passages); or the sets of a Search-R1
    data file, one per ``data_source`` (:func:`~rag_curriculum.loaders.load_search_r1`)."""
    if Path(directory).is_file():
        sets = load_search_r1(directory) if is_search_r1_file(directory) else [load_flashrag(directory)]
        return [(got.name, got.rows[:limit] if limit else got.rows) for got in sets]
    table = read_table(directory)
    cols = [c for c in _COLUMNS if c in table.schema.names]
    missing = {"id", "data_source", "question", "answers"} - set(cols)
    if missing:
        raise EvalError(f"{directory}: the rows have no {', '.join(sorted(missing))} column",
                        hint="pass a shard directory made by curriculum build")
    by: dict[str, list[dict[str, Any]]] = {}
    for r in table.select(cols).to_pylist():
        by.setdefault(r["data_source"], []).append(r)
    if not by:
        raise EvalError(f"{directory}: no rows")
    return [(ds, rows[:limit] if limit else rows) for ds, rows in by.items()]


def _rows_digest(rows: Sequence[dict[str, Any]]) -> str:
    """What the questions are: ids, questions, answers and gold passages (a rerun reuses results only for these)."""
    keep = [[r["id"], r["question"], r["answers"], [(p["title"], p["text"]) for p in (r.get("passages") or [])
                                                   if p.get("is_gold")]] for r in rows]
    return hashlib.sha256(json.dumps(keep, ensure_ascii=False).encode("utf-8")).hexdigest()


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def score_trajectories(rows: Sequence[dict[str, Any]], trajs: Sequence[Any], m: int,
                       extra: dict[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """The scores of ``m`` trajectories per row (row order, then sample order): overall and by hops, level and
    answerable (each a mean over questions of the per-question mean over samples); with ``extra`` (a metric ->
    each trajectory's score, same order: a ``--reward``'s) its mean too."""
    per_q: list[dict[str, float]] = []
    errors: dict[str, int] = defaultdict(int)
    status: dict[str, int] = defaultdict(int)
    for qi, row in enumerate(rows):
        ts = trajs[qi * m:(qi + 1) * m]
        gold = {passage_hash(p["title"], p["text"]) for p in (row.get("passages") or []) if p.get("is_gold")}
        em, f1, searches, seen_gold, recall = [], [], [], [], []
        for t in ts:
            e, f = answer_scores(t.answer, row["answers"]) if t.answer is not None else (0.0, 0.0)
            em.append(e)
            f1.append(f)
            searches.append(len(t.searches))
            seen_gold.append(float(t.gold_found))
            found = {i for c in t.searches for i, g in zip(c.ids, c.gold, strict=True) if g}
            recall.append(min(len(found), len(gold)) / len(gold) if gold else 0.0)
            status[t.status] += 1
            for err in t.errors:
                errors[err] += 1
        per_q.append({"em": _mean(em), "f1": _mean(f1), "searches": _mean(searches),
                      "gold_seen": _mean(seen_gold), "gold_recall": _mean(recall)})
        for name, scores in (extra or {}).items():
            per_q[-1][name] = _mean(scores[qi * m:(qi + 1) * m])

    def agg(idx: Sequence[int]) -> dict[str, float]:
        return {k: round(100 * _mean([per_q[i][k] for i in idx]), 2) if k != "searches"
                else round(_mean([per_q[i][k] for i in idx]), 3) for k in per_q[0]} | {"questions": len(idx)}

    out: dict[str, Any] = {"overall": agg(range(len(rows))) if rows else {}, "format_errors": dict(errors),
                           "status": dict(status)}
    for key in ("hops", "level", "answerable"):
        groups: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            if r.get(key) is not None:
                groups[str(r[key]).lower()].append(i)
        if groups:
            out[f"by_{key}"] = {g: agg(idx) for g, idx in sorted(groups.items())}
    return out


def _drop_gold(entry: dict[str, Any], sections: Sequence[str] = ()) -> None:
    """Remove the gold-passage scores from an entry (every aggregate, those of the parts' ``sections`` too: a
    ReAct run's best-of-N)."""
    for node in [entry.get("overall"), *[v for k in sections for v in (entry.get(k) or {}).values()],
                 *[g for k, v in entry.items() if k.startswith("by_") for g in v.values()]]:
        if isinstance(node, dict):
            node.pop("gold_recall", None)
            node.pop("gold_seen", None)
    entry["gold_passages"] = False


def run_agent_eval(cfg: AgentEvalConfig, *, progress: bool = False, command: str | None = None,
                   backend_factory: Any = None) -> dict[str, Any]:
    """Evaluate every model on every question set through the search environment (see the module docstring).

    ``curriculum eval --agent`` calls this; a set whose results were written with the same settings is reused.

    Args:
        cfg: the agent evaluation's settings (agent, retriever, models, question sets, samples ``m``, ``out``, ...).
        progress: show progress bars.
        command: the command line recorded in ``summary.json``.
        backend_factory: ``backend_factory(model)`` builds a model's backend (default: from ``cfg.backend`` and
            ``cfg.backend_args``).

    Returns:
        The summary (``summary.json``): one entry per (model, set) with EM, F1, searches per question, gold recall,
        format errors and endings.

    Raises:
        ConfigError: settings that cannot be used (a :class:`UsageError` for two sets that would share a name).
        RetrieverError: a retriever (``--retriever DIR|URL``) that cannot be opened or does not answer.
        EvalError: ``cfg.out`` is not an agent evaluation's output, another run holds its lock, or results made
            with other settings (without ``overwrite``).
        GenerationError: a backend that cannot generate as asked.

    Examples:
        ```python
        from rag_curriculum.evaluation import AgentEvalConfig, ModelSpec, run_agent_eval

        cfg = AgentEvalConfig(agent="search-r1", retriever="outputs/index-wiki", data=["FlashRAG_datasets/nq/test.jsonl"],
                              models=[ModelSpec.parse("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-3b-em-ppo")],
                              out="outputs/eval-agent")
        summary = run_agent_eval(cfg, progress=True)
        ```
    """
    cfg.validate()
    out = Path(cfg.out)
    _check_out(out)
    sets = [(d, ds, rows) for d in cfg.data for ds, rows in load_question_sets(d, limit=cfg.limit)]
    keys = [set_name(ds, d) for d, ds, _ in sets]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UsageError(f"two --data sets would both be named {', '.join(twice)} in the results",
                         hint="give the folders distinct names")
    retriever = open_retriever(cfg.retriever, timeout=cfg.retriever_timeout, retries=cfg.retriever_retries)
    getattr(retriever, "probe", lambda: None)()  # a retriever that cannot answer fails before anything is written
    # a run that failed before its first result leaves no --out
    with resumable_output(out, LOCK, "eval --agent", EvalError, started=(out / "results").exists):
        return _run(cfg, out, sets, keys, retriever, progress=progress, command=command,
                    backend_factory=backend_factory)


def set_name(dataset: str, data: str | Path) -> str:
    """The name of one question set in the results: the ``--data`` folder's (or file's) name, prefixed by its
    dataset unless the name already starts with it (``eval/musique-distractor`` is ``musique-distractor``, not
    ``musique-musique-distractor``; a Search-R1 file's ``nq`` rows of ``test.parquet`` are ``nq-test.parquet``).

    >>> set_name("musique", "eval/musique-distractor"), set_name("musique", "outputs/agent-rows")
    ('musique-distractor', 'musique-agent-rows')
    """
    name = Path(data).name
    return name if name == dataset or name.startswith(f"{dataset}-") else f"{dataset}-{name}"


def _check_out(out: Path) -> None:
    """``--out`` is a new or empty folder, or one an agent evaluation wrote (its ``eval_config.json`` says so):
    results land beside the toolkit's own files only, never inside a folder of the user's."""
    check_resumable(out, written=_agent_eval_wrote, what="the output of an agent evaluation", error=EvalError,
                    ignore=(LOCK,))


def _agent_eval_wrote(out: Path, entries: list[str]) -> bool:
    try:
        return json.loads((out / "eval_config.json").read_text()).get("config", {}).get("agent") is not None
    except (OSError, ValueError, AttributeError):
        return False


def _differing(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The keys (dotted) where two recorded settings differ, each with its two values when they are short."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str) if old.get(k) != new.get(k)
                for d in _differing(old.get(k), new.get(k), f"{prefix}{k}.")]
    a, b = json.dumps(old, ensure_ascii=False), json.dumps(new, ensure_ascii=False)
    return [f"{prefix[:-1]} {a} -> {b}" if len(a) + len(b) < 80 else prefix[:-1]]


def _run(cfg: AgentEvalConfig, out: Path, sets: list[Any], keys: list[str], retriever: Any, *, progress: bool,
         command: str | None, backend_factory: Any) -> dict[str, Any]:
    write_json(out / "eval_config.json", mask_secrets({"config": cfg.to_dict(),
                                                        "command": redact_command(command)}))
    parts = cfg.parts()
    # the settings of the parts this run does not use are left out of its fingerprint: results made without a
    # part are reused by a run without it
    unused = {k for registry in (AGENT_PROTOCOLS, FAITHFULNESS_MEASURES, TRAJECTORY_REWARDS)
              for part in registry.loaded().values() if part not in parts for k in part.settings}
    settings = {k: v for k, v in cfg.to_dict().items() if k not in ("models", "data", "out", "overwrite", "limit",
                                                                    "retriever_timeout", "retriever_retries", "plots")
                and k not in unused
                and not (cfg.faithfulness is None and k == "faithfulness")
                and not (cfg.reward is None and k in ("reward", "reward_args"))}
    described = retriever.describe()
    # which index answers (its content: sources, fingerprint), not where it is: a rerun reuses results only
    # from the same index, and a server swapped behind the URL stops the run (HttpRetriever)
    content = mask_secrets({k: v for k, v in described.items() if k not in ("path", "url")})
    summary: dict[str, Any] = {"agent": cfg.agent, "retriever": described, "evals": []}
    for model in cfg.models:
        backend = None
        try:
            for (d, ds, rows), key in zip(sets, keys, strict=True):
                fp = {"settings": settings, "model": mask_secrets(model.path), "rows": _rows_digest(rows),
                      "retriever": content}
                res_path = out / "results" / model.name / f"{key}.json"
                if res_path.is_file():
                    old = json.loads(res_path.read_text())
                    if old.get("fingerprint") == fp:
                        summary["evals"].append(old["entry"])
                        continue
                    if not cfg.overwrite:
                        diff = ", ".join(_differing(old.get("fingerprint"), json.loads(json.dumps(fp)))) or "?"
                        raise EvalError(f"{res_path} holds results made with other settings (differs in: {diff})",
                                        hint="pass --overwrite to evaluate again, or choose another --out")
                if backend is None:
                    backend = (backend_factory(model) if backend_factory
                               else get_backend(cfg.backend, model=model.path, **cfg.backend_args))
                label = f"{model.name} · {key}"
                started = time.monotonic()
                log.info("%s: %d question(s) x %d sample(s), at most %d turn(s) each", label, len(rows), cfg.m,
                         cfg.max_turns)
                with maybe_progress(progress, unit="turns") as bar:
                    task = bar.add_task(label, total=cfg.max_turns) if bar else None

                    def on_turn(turn: int, active: int, bar: Any = bar, task: Any = task, label: str = label,
                                started: float = started) -> None:
                        if bar is not None:
                            bar.update(task, completed=turn, description=f"{label} · {active} active")
                        else:  # not on a terminal (piped, logged): a line per turn, as the other commands log
                            log.info("%s: turn %d of %d, %d trajectory(ies) going (%.0f s so far)", label,
                                     turn + 1, cfg.max_turns, active, time.monotonic() - started)

                    trajs = run_rollouts(backend, rows, retriever, cfg.sampling(), n=cfg.m, config=cfg.rollout(),
                                         on_turn=on_turn, fmt=cfg.fmt())
                dicts = [{"model": model.name, "set": key, **t.to_dict()} for t in trajs]
                run = AgentSetRun(out=out, model=model.name, key=key, rows=rows, trajs=trajs, dicts=dicts, m=cfg.m,
                                  backend=backend)
                sections: dict[str, Any] = {}  # each part's scores of the set, under its key in the entry
                extra_scores: dict[str, list[float]] = {}  # a reward's score of every trajectory, beside EM / F1
                for part in parts:
                    section = part.score_set(cfg, run)
                    if section is not None:
                        sections[part.key] = section
                    scores = part.trajectory_scores(cfg, run)
                    if scores is not None:
                        extra_scores[part.key] = scores
                        for dct, s in zip(dicts, scores, strict=True):
                            dct[part.key] = s
                tpath = out / "trajectories" / model.name / f"{key}.jsonl"
                tpath.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(tpath, "".join(json.dumps(dct, ensure_ascii=False) + "\n"
                                                  for dct in dicts).encode("utf-8"))
                entry = {"model": model.name, "dataset": ds, "set": key, "data": Path(d).name,
                         "questions": len(rows), "samples": cfg.m,
                         **score_trajectories(rows, trajs, cfg.m, extra=extra_scores)}
                entry.update(sections)
                if not any(p.get("is_gold") for r in rows for p in (r.get("passages") or [])):
                    _drop_gold(entry, list(sections))  # a set without gold passages (FlashRAG's): no gold recall
                res_path.parent.mkdir(parents=True, exist_ok=True)
                write_json(res_path, {"fingerprint": fp, "entry": entry})
                summary["evals"].append(entry)
                o = entry["overall"]
                log.info("%s: done in %.0f s: EM %.1f, F1 %.1f, %.2f searches / question%s", label,
                         time.monotonic() - started, o.get("em", 0.0), o.get("f1", 0.0), o.get("searches", 0.0),
                         "".join(f", {p.label} {o[p.key]:.1f}" for p in parts if p.label and p.key in o))
        finally:
            if backend is not None:
                backend.close()
    plots = write_agent_plots(summary, out / "plots") if cfg.plots and summary["evals"] else []
    summary["plots"] = [p.relative_to(out).as_posix() for p in plots]
    write_json(out / "summary.json", summary)
    atomic_write_text(out / "table.md", render_table(summary))
    write_dataset_card(out, data_files="trajectories/*/*.jsonl", title="Search-agent evaluation: trajectories",
                       rows="one row per trajectory (model, set, row_id, sample, prompt, segments, searches with "
                            "their passage ids and gold flags, errors, answer, status, turns)")
    for part in parts:
        part.finish(cfg, out, summary)
    return summary


def render_table(summary: dict[str, Any]) -> str:
    """EM / F1 per dataset (columns) and model (rows), then searches per question and gold recall, as the
    agentic papers lay out their main tables (scores x 100)."""
    sets = list(dict.fromkeys(e["set"] for e in summary["evals"]))
    models = list(dict.fromkeys(e["model"] for e in summary["evals"]))
    cell_entry = {(e["model"], e["set"]): e for e in summary["evals"]}
    head = "| model | " + " | ".join(f"{s} EM | {s} F1" for s in sets) + " | searches / q | gold recall |"
    lines = [f"# Search agent ({summary['agent']})", "", head, "|" + "---|" * (1 + 2 * len(sets) + 2)]
    for mname in models:
        for label, vals in table_rows(mname, [cell_entry.get((mname, s)) for s in sets]):
            scores = " | ".join(f"{v.get('em', 0):.1f} | {v.get('f1', 0):.1f}" for v in vals)
            searches = [v["searches"] for v in vals if "searches" in v]
            recall = [v["gold_recall"] for v in vals if "gold_recall" in v]
            lines.append(f"| {label} | {scores} | {f'{_mean(searches):.2f}' if searches else '-'} | "
                         f"{f'{_mean(recall):.1f}' if recall else '-'} |")
    for registry in (AGENT_PROTOCOLS, FAITHFULNESS_MEASURES, TRAJECTORY_REWARDS):  # the parts' sections
        for part in registry.loaded().values():
            lines += part.report_section(summary) or []
    lines += ["", "## Format errors and how trajectories ended", "",
              "| model | set | trajectories | format errors | ended |", "|---|---|---|---|---|"]
    for e in summary["evals"]:
        lines.append(f"| {e['model']} | {e['set']} | {e['questions'] * e['samples']} | {format_errors(e)} | "
                     f"{endings(e)} |")
    for p in summary.get("plots") or []:
        lines += ["", f"![{Path(p).stem}]({p})"]
    return "\n".join(lines) + "\n"


def format_errors(entry: dict[str, Any]) -> str:
    """An entry's format errors by type (``no_action 24, malformed_tag 2``), or ``none``."""
    return ", ".join(f"{k} {v}" for k, v in sorted(entry.get("format_errors", {}).items())) or "none"


def endings(entry: dict[str, Any]) -> str:
    """How an entry's trajectories ended, by status (``answer 6, turn_budget 2``)."""
    return ", ".join(f"{k} {v}" for k, v in sorted(entry.get("status", {}).items())) or "-"


def write_agent_plots(summary: dict[str, Any], directory: Path) -> list[Path]:
    """``scores.png`` (EM, F1 and, where the sets have gold passages, gold recall: models side by side over the
    sets) and ``ended.png`` (the share of trajectories by how they ended, per model and set)."""
    evals = summary["evals"]
    sets = list(dict.fromkeys(e["set"] for e in evals))
    models = list(dict.fromkeys(e["model"] for e in evals))
    at = {(e["model"], e["set"]): e for e in evals}

    def series(metric: str) -> dict[str, list[float | None]]:
        return {m: [at[(m, s)]["overall"][metric] / 100 if (m, s) in at and metric in at[(m, s)]["overall"]
                    else None for s in sets] for m in models}

    metrics = [("em", "EM"), ("f1", "F1")] + ([("gold_recall", "gold recall")]
                                              if any("gold_recall" in e["overall"] for e in evals) else [])
    written = [bar_panels(sets, [(title, series(m)) for m, title in metrics], xlabel="set", path=directory /
                          "scores.png", title=f"search agent ({summary['agent']}): scores (x 100)")]
    statuses = sorted({k for e in evals for k in e.get("status", {})})
    if statuses:
        panels = []
        for m in models:
            shares = {}
            for s in sets:
                e = at.get((m, s))
                total = sum((e or {}).get("status", {}).values())
                shares[s] = [e["status"].get(k, 0) / total if e and total else None for k in statuses]
            panels.append((m, shares))
        written.append(bar_panels(statuses, panels, xlabel="how the trajectory ended", path=directory / "ended.png",
                                  title="how trajectories ended, per model", ylabel="% of the set's trajectories"))
    return written


def table_rows(model: str, entries: Sequence[dict[str, Any] | None]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The table's rows of one model: its scores per set (one row), unless an agent protocol lays them out
    (:meth:`~rag_curriculum.agents.AgentEvalPart.table_rows`: a ReAct run with N > 1 samples adds ReAct+CRAG's
    best of N and self-consistency's rows)."""
    for part in AGENT_PROTOCOLS.loaded().values():
        rows = part.table_rows(model, entries)
        if rows is not None:
            return rows
    return [(model, [(e or {}).get("overall", {}) for e in entries])]
