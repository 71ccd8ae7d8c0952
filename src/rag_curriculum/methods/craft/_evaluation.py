"""CRAFT in the evaluation: evaluation sets re-rendered in a CRAFT trace format (``curriculum eval --template
craft-vN``, repeatable), the CRAFT scores of each sample (evidence F1, the citation-boundary check, the judge's
faithfulness), and the per-variant table laid out like the CRAFT paper's Table 2.

Re-rendering keeps each row's passages and their order and replaces what the format decides: the passage labels
(numbers, from ``index_base``), the gold labels (the gold passages' numbers), the prompt and the ``template``
column. One evaluation set built once is thus evaluated in every variant on the same questions and documents, as
the paper evaluates its five templates on the same 2,000 samples per benchmark.

Per sample (every score a fraction; tables show x 100):

* EM and F1 of the ``<answer>`` (the one scorer); **evidence F1**: F1 of the ``<gold_docs>`` numbers against the
  gold ones (the citation F1 of a CRAFT row; v1, v2);
* **format**: the trace keeps its variant's format (Table 11's compliance);
* **boundary**: the numbers cited in ``<reason>`` are a non-empty subset of ``<gold_docs>`` (Algorithm 1, check B,
  computed; v1, v2);
* with a judge (``--judge BACKEND:MODEL``): **faithfulness**, 1 when every check of Algorithm 1 passes (the
  "Overall" of the paper's case studies, its Faithfulness column), and **faithfulness_mean**, the mean of the
  checks (Eq. 7). Every sample with a ``<reason>`` is audited, whatever its format (the paper reports
  faithfulness above zero for models whose format compliance rounds to zero); a sample without one scores 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ..._titles import _dataset_order, _setting_order, dataset_title, pct, setting_title
from ...cards import md_table
from ...errors import ConfigError
from ...prompts import get_template
from ...rewards import FORMATS
from ...rewards import aggregate as _aggregate
from ._format import CRAFT_VARIANTS, parse_craft
from ._judge import CraftJudge
from ._reward import boundary_check

__all__ = ["CRAFT_FIELDS", "EVAL_SCORER", "add_craft_scores", "craft_entry", "craft_variant_of", "make_judge", "rerender",
           "render_variants_table", "result_schema"]

#: Per-question columns a CRAFT result adds (besides the sample lists of the same names).
CRAFT_FIELDS = ("boundary", "faithfulness", "faithfulness_mean")
_JUDGE_FIELDS = ("cache_dir", "prompt", "citation_check", "max_tokens", "temperature", "seed")


def craft_variant_of(es: Any) -> str | None:
    """The CRAFT format of an evaluation set (its re-rendering template, else its rows'), or None."""
    name = getattr(es, "template", None) or (es.rows[0].get("template") if es.rows else None)
    return name if name in CRAFT_VARIANTS else None


def rerender(es: Any, template: str, index_base: int | None = None) -> Any:
    """``es`` with every row rendered in ``template``: same passages in the same order, their labels, the gold
    labels, the prompt and the ``template`` column made by that template (numbered from ``index_base``)."""
    tpl = get_template(template)
    if index_base is not None:
        tpl = tpl.with_index_base(index_base)
    FORMATS.get(template)  # a template without a parser cannot be scored: refused now
    rows = []
    for r in es.rows:
        passages = list(r.get("passages") or [])
        if not passages:
            raise ConfigError(f"{es.directory}: row {r.get('id')} has no passages to render in {template}")
        titles = [p["title"] for p in passages]
        texts = [p["text"] for p in passages]
        labels = tpl.labels(titles)
        new_passages = [{**p, "label": lb} for p, lb in zip(passages, labels, strict=True)]
        gold = [lb for p, lb in zip(passages, labels, strict=True) if p.get("is_gold")]
        extra = dict(r.get("extra_info") or {})
        if "labels" in extra:
            extra["labels"] = labels
        rows.append({**r, "passages": new_passages, "gold_labels": gold, "extra_info": extra, "template": template,
                     "prompt": tpl.render_fields(r["question"], labels, titles, texts)})
    return replace(es, rows=rows, template=template)


def make_judge(spec: str | None, args: Mapping[str, Any], *, default_cache: str) -> CraftJudge | None:
    """The evaluation's judge from ``--judge BACKEND:MODEL`` and ``--judge-arg KEY=VALUE`` (the judge's own
    options, ``cache_dir`` (default: the run's ``judge-cache/``), ``prompt``, ``citation_check``, ``max_tokens``;
    every other key is an option of the backend, such as ``base_url`` or ``api_key``)."""
    if not spec:
        return None
    backend, _, model = spec.partition(":")
    own = {k: v for k, v in args.items() if k in _JUDGE_FIELDS}
    own.setdefault("cache_dir", default_cache)
    backend_args = {k: v for k, v in args.items() if k not in _JUDGE_FIELDS}
    return CraftJudge(backend=backend, model=model or None, backend_args=backend_args, aggregate="all", **own)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def add_craft_scores(records: list[dict[str, Any]], rows: Sequence[Mapping[str, Any]], variant: str,
                     judge: CraftJudge | None, *, strict_format: bool = False) -> list[dict[str, Any]]:
    """Add the CRAFT sample scores (``sample_boundary``, and with a judge ``sample_faithfulness``,
    ``sample_faithfulness_mean``, ``sample_judge``) and their per-question means to the scored ``records``; one
    batched judge call for the whole set. With ``strict_format`` a sample that breaks the format scores 0 here too
    (and is not sent to the judge)."""
    tags = CRAFT_VARIANTS[variant]
    has_gold = "gold_docs" in tags
    judged = judge is not None and "reason" in tags
    items, where = [], []
    for q, (rec, row) in enumerate(zip(records, rows, strict=True)):
        parses = [parse_craft(t, variant=variant) for t in rec["completions"]]
        keep = [p.valid or not strict_format for p in parses]
        if has_gold:
            rec["sample_boundary"] = [boundary_check(p.cited, p.gold_docs) if k else 0.0
                                      for p, k in zip(parses, keep, strict=True)]
            rec["boundary"] = _mean(rec["sample_boundary"])
        if judged:
            rec["sample_faithfulness"] = [0.0] * len(parses)
            rec["sample_faithfulness_mean"] = [0.0] * len(parses)
            rec["sample_judge"] = [None] * len(parses)
            passages = [(str(p["label"]), str(p["title"]), str(p["text"])) for p in row.get("passages") or []]
            for j, (p, text) in enumerate(zip(parses, rec["completions"], strict=True)):
                if p.reasoning and keep[j]:
                    items.append((str(row.get("question") or ""), passages, text, variant))
                    where.append((q, j))
    if judged:
        verdicts = judge.audit(items) if items else []
        for (q, j), v in zip(where, verdicts, strict=True):
            rec = records[q]
            rec["sample_faithfulness"][j] = 1.0 if v.checks and all(v.checks.values()) else 0.0
            rec["sample_faithfulness_mean"][j] = sum(v.checks.values()) / len(v.checks) if v.checks else 0.0
            rec["sample_judge"][j] = json.dumps({"checks": v.checks, "failures": list(v.failures),
                                                 **({"error": v.error} if v.error else {})}, sort_keys=True)
        for rec in records:
            rec["faithfulness"] = _mean(rec["sample_faithfulness"])
            rec["faithfulness_mean"] = _mean(rec["sample_faithfulness_mean"])
    return records


def result_schema(base: pa.Schema, records: Sequence[Mapping[str, Any]]) -> pa.Schema:
    """``base`` with the CRAFT columns the records hold."""
    schema = base
    for name in CRAFT_FIELDS:
        if records and name in records[0]:
            schema = schema.append(pa.field(name, pa.float64()))
            schema = schema.append(pa.field(f"sample_{name}", pa.list_(pa.float64())))
    if records and "sample_judge" in records[0]:
        schema = schema.append(pa.field("sample_judge", pa.list_(pa.string())))
    return schema


def craft_entry(entry: dict[str, Any], records: Sequence[Mapping[str, Any]], variant: str, *, model: str,
                renamed: bool) -> dict[str, Any]:
    """Add the CRAFT aggregates to a summary entry: ``template``, ``model_name`` and, in ``overall``,
    ``evidence_f1`` (None without ``<gold_docs>``), ``boundary`` and, when judged, ``faithfulness`` and
    ``faithfulness_mean`` (mean over each question's samples, then over questions). With ``renamed`` (several
    templates in one run) the entry's ``model`` becomes ``MODEL (TEMPLATE)`` so the other tables keep them apart."""
    entry["template"] = variant
    entry["model_name"] = model
    if renamed:
        entry["model"] = f"{model} ({variant})"
    overall = entry["overall"]
    has_gold = "gold_docs" in CRAFT_VARIANTS[variant]
    overall["evidence_f1"] = overall.get("citation_f1") if has_gold else None
    for name in CRAFT_FIELDS:
        overall[name] = _aggregate([float(r[name]) for r in records]) if records and name in records[0] else None
    return entry


# ---------------------------------------------------------------------------------------------------------------
# The CRAFT paper's Table 2 layout

TABLE2_METRICS = (("exact_match", "EM"), ("answer_f1", "F1"), ("evidence_f1", "Evidence F1"),
                  ("format_valid", "Format"), ("faithfulness", "Faithfulness"))


def render_variants_table(summary: Mapping[str, Any]) -> str | None:
    """The CRAFT entries of a summary as the paper's Table 2: a block of rows per model (and setting), one row per
    trace format, and for each dataset EM, F1, evidence F1, format compliance and faithfulness (x 100; "–" where
    a metric does not apply or no judge ran). None when the summary holds no CRAFT entry."""
    evals = [e for e in summary.get("evals", []) if e.get("template") in CRAFT_VARIANTS]
    if not evals:
        return None
    datasets = _dataset_order(e["dataset"] for e in evals)
    header = ["Model", "Version"] + [f"{dataset_title(d)} {title}" for d in datasets for _, title in TABLE2_METRICS]
    rows: list[list[str]] = []
    settings = _setting_order(e["setting"] for e in evals)
    # a model's block: its name, prefixed with its run's where `eval compare` merged runs that share a model name
    runs_of: dict[str, set] = {}
    for e in evals:
        runs_of.setdefault(e.get("model_name", e["model"]), set()).add(e.get("run"))

    def block(e: Mapping[str, Any]) -> str:
        name = e.get("model_name", e["model"])
        return f"{e['run']}/{name}" if len(runs_of[name]) > 1 and e.get("run") else name

    models: dict[str, None] = {}
    for e in evals:
        models.setdefault(block(e), None)
    for setting in settings:
        for model in models:
            mine = [e for e in evals if e["setting"] == setting and block(e) == model]
            if not mine:
                continue
            label = f"*{model}*" + (f" ({setting_title(setting).lower()})" if len(settings) > 1 else "")
            rows.append([label, ""] + [""] * (len(header) - 2))
            for variant in sorted({e["template"] for e in mine}, key=lambda v: list(CRAFT_VARIANTS).index(v)):
                cells = []
                for d in datasets:
                    e = next((x for x in mine if x["template"] == variant and x["dataset"] == d), None)
                    o = (e or {}).get("overall") or {}
                    cells += [pct(o.get(k)) if e is not None else "–" for k, _ in TABLE2_METRICS]
                rows.append(["", "CRAFT_" + variant.split("-")[-1], *cells])
    return md_table(header, rows)


class CraftEvalScorer:
    """CRAFT's part of ``curriculum eval`` (:data:`rag_curriculum.rewards.EVAL_SCORERS`, as ``craft``): its trace
    formats re-rendered (``--template craft-vN``), judged (``--judge``), scored, and laid out as the paper's
    Table 2 in ``table.md``."""

    variant_of = staticmethod(craft_variant_of)
    rerender = staticmethod(rerender)
    make_judge = staticmethod(make_judge)
    add_scores = staticmethod(add_craft_scores)
    result_schema = staticmethod(result_schema)
    entry = staticmethod(craft_entry)

    @staticmethod
    def report_section(summary: Mapping[str, Any]) -> list[str] | None:
        """``table.md``'s section of the CRAFT entries (the paper's Table 2 layout), or None."""
        variants = render_variants_table(summary)
        if variants is None:
            return None
        return ["## CRAFT trace formats", "", "EM and F1 of the <answer>, evidence F1 of <gold_docs>, format "
                "compliance, and faithfulness (every check of Algorithm 1 passes; with --judge), x 100.", "",
                variants, ""]


#: The object registered as the ``craft`` evaluation scorer.
EVAL_SCORER = CraftEvalScorer()
