"""CRAFT's rewards (section 3.3, Eqs. 2-7): a format gate, evidence F1, answer SoftF1, faithfulness.

Terms of one completion y of variant v (every term but the format is 0 when the format is broken: Eq. 3's gate):

=============  ===================  ===========================================================================
term           registry name        value
=============  ===================  ===========================================================================
``format``     ``craft-format``     R_fmt = 1 when y keeps v's format (:mod:`._craft_format`), else 0 (Eq. 3)
``evidence``   ``craft-evidence``   R_gold = F1 between the ``<gold_docs>`` numbers and the gold documents'
                                    numbers (the row's ``gold_labels``), v1 / v2 only (Eq. 4)
``answer``     ``craft-answer``     R_ans = SoftF1: token F1 of the ``<answer>`` against the gold answer and its
                                    aliases after SQuAD normalisation (the one answer F1, ``_metrics``) (Eq. 5)
``boundary``   ``craft-boundary``   deterministic faithfulness: 1 when the numbers cited in ``<reason>`` are a
                                    non-empty subset of ``<gold_docs>`` (Algorithm 1, check B), v1 / v2 only
``judge``      ``craft-judge``      R_faith: the LLM judge's audit (Algorithm 1, :mod:`._judge`), v1-v4 (Eqs. 6-7)
=============  ===================  ===========================================================================

``craft`` is the total: by default the terms of appendix B for the variant (format, answer, and evidence where
``<gold_docs>`` exists) plus the judge when one is configured, every weight 1.0; ``normalize=False`` (default)
sums them, which is what the paper's reported totals add up to (Fig. 3: 7B 1.0 + 0.92 + 0.89 + 0.60 = 3.41),
``normalize=True`` divides by the sum of the weights, Eq. 2 as printed. The component rewards return one term
each, for TRL's per-function ``reward_weights``.

Unanswerable rows (``answerable`` false, ``curriculum build --unanswerable-fraction``): the craft-v1 prompt asks for
no document in ``<gold_docs>``, so R_gold follows the rule the RAG-RL reward and the evaluation follow: 1 when
nothing is listed (and an answer is stated), 0 for any listed document. The row's ``answerable`` comes from the
``answerable`` column, else ``reward_model.ground_truth.answerable`` (a row without it is answerable).

>>> r = CraftReward("craft-v1")
>>> y = "<plan>Q1</plan><gold_docs>[2, 5]</gold_docs><reason>doc [2] says</reason><answer>the Sun</answer>"
>>> b = r.score(y, answers=["Sun"], gold_labels=["2", "7"])
>>> b.format, b.evidence, b.answer, b.boundary, b.total
(1.0, 0.5, 1.0, 1.0, 2.5)
>>> r.score(y.replace("</answer>", ""), answers=["Sun"], gold_labels=["2"]).total   # the gate
0.0
>>> none = "<plan>Q1</plan><gold_docs>[]</gold_docs><reason>no document says</reason><answer>unanswerable</answer>"
>>> r.score(none, answers=["unanswerable"], gold_labels=[], answerable=False).evidence   # as the eval scores it
1.0
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ...errors import ConfigError
from ...rewards import (
    FORMATS,
    batch_answers,
    check_columns,
    completion_text,
    completion_texts,
    row_answerable,
    row_gold_labels,
    score_completion,
)
from ._format import CRAFT_VARIANTS
from ._judge import CraftJudge, checks_for

__all__ = [
    "CraftAnswerReward",
    "CraftBoundaryReward",
    "CraftBreakdown",
    "CraftEvidenceReward",
    "CraftFormatReward",
    "CraftJudgeReward",
    "CraftReward",
    "TERMS",
    "boundary_check",
]

TERMS = ("format", "answer", "evidence", "boundary", "judge")


def boundary_check(cited: Sequence[int], gold_docs: Sequence[int] | None) -> float:
    """Algorithm 1, check B, computed: 1.0 when the documents cited in ``<reason>`` are a non-empty subset of the
    declared ``<gold_docs>``.

    >>> boundary_check([2, 7], [2, 7]), boundary_check([8, 4, 2], [8, 4]), boundary_check([], [1])
    (1.0, 0.0, 0.0)
    """
    return 1.0 if cited and gold_docs is not None and set(cited) <= set(gold_docs) else 0.0


@dataclass(frozen=True, slots=True)
class CraftBreakdown:
    """One completion's CRAFT reward: the total, each term (None where it does not apply to the variant or was
    not computed), and the metrics behind them."""

    total: float
    format: float
    answer: float
    evidence: float | None
    boundary: float | None
    judge: float | None
    exact_match: float
    answer_f1: float
    evidence_precision: float
    evidence_recall: float
    format_valid: bool
    format_reason: str | None
    judge_checks: Mapping[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_weight(name: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or value > 1e6):  # (the weighted sum of the terms stays finite)
        raise ConfigError(f"CRAFT weight {name} must be a finite number in 0..1e6, got {value!r}",
                          hint="appendix B sets every weight to 1.0; 0 switches a term off")
    return float(value)


@dataclass(frozen=True)
class CraftReward:
    """The CRAFT reward as a picklable, batched TRL reward function (returns the total per completion).

    Call it the TRL way, ``reward(completions=..., answers=..., gold_labels=..., passages=..., question=...)``,
    or get the terms with :meth:`score` / :meth:`components`. ``gold_labels`` are the gold documents' numbers (a
    ``craft-v*`` build writes them); ``question`` and ``passages`` are read only by the judge.
    """

    output_format: str = "craft-v1"
    """The CRAFT variant (craft-v1 ... craft-v5): its tags decide which terms apply."""
    terms: tuple[str, ...] | None = None
    """The terms of the total; None: appendix B's for the variant (format, answer, evidence where <gold_docs>
    exists) plus judge when ``judge`` is set."""
    weights: Mapping[str, float] | None = None
    """Weight per term (default 1.0 each: "All reward weights are set to 1.0")."""
    normalize: bool = False
    """False: the weighted sum (the paper's reported totals); True: divided by the sum of the weights (Eq. 2)."""
    judge: Any = None
    """The faithfulness judge: a mapping of :class:`~rag_curriculum.methods.craft.CraftJudge` options (backend,
    model, backend_args, aggregate, citation_check, cache_dir, prompt, ...) or a CraftJudge."""
    log_components: bool = True
    """Log batch means of every term through TRL's ``log_metric`` (and format reasons via ``log_extra``)."""

    __name__: ClassVar[str] = "craft"
    component: ClassVar[str] = "total"
    _judge: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.output_format not in CRAFT_VARIANTS:
            close = difflib.get_close_matches(str(self.output_format), list(CRAFT_VARIANTS), n=1)
            raise ConfigError(f"output_format {self.output_format!r} is not a CRAFT format"
                              f"{f'; did you mean {close[0]!r}?' if close else ''}",
                              hint=f"one of {', '.join(CRAFT_VARIANTS)}")
        tags = CRAFT_VARIANTS[self.output_format]
        if self.judge is not None:
            if not checks_for(tags):
                raise ConfigError(f"{self.output_format} has no <reason>: there is no trace for the judge to audit",
                                  hint="drop the judge for craft-v5 (the paper: R_faith not applicable)")
            j = self.judge if isinstance(self.judge, CraftJudge) else CraftJudge(**dict(self.judge))
            object.__setattr__(self, "_judge", j)
        terms = self.terms
        if terms is None:
            terms = ("format", "answer") + (("evidence",) if "gold_docs" in tags else ()) + (
                ("judge",) if self.judge is not None else ())
        terms = tuple(terms)
        for t in terms:
            if t not in TERMS:
                raise ConfigError(f"unknown CRAFT term {t!r}; terms are {', '.join(TERMS)}")
            if t in ("evidence", "boundary") and "gold_docs" not in tags:
                raise ConfigError(f"{self.output_format} has no <gold_docs>: the {t} term does not apply to it",
                                  hint="R_gold and the citation-boundary check are for craft-v1 and craft-v2")
            if t == "judge" and self._judge is None:
                raise ConfigError("the judge term needs a judge", hint="give judge={backend: ..., model: ...}")
        if self.component in ("evidence", "boundary") and "gold_docs" not in tags:  # the component classes
            raise ConfigError(f"{self.output_format} has no <gold_docs>: craft-{self.component} does not apply to it",
                              hint="R_gold and the citation-boundary check are for craft-v1 and craft-v2")
        object.__setattr__(self, "terms", terms)
        weights = {t: 1.0 for t in terms}
        for k, v in (self.weights or {}).items():
            if k not in TERMS:
                raise ConfigError(f"weights: unknown CRAFT term {k!r}; terms are {', '.join(TERMS)}")
            weights[k] = _check_weight(k, v)
        object.__setattr__(self, "weights", weights)
        if self.normalize and not sum(weights[t] for t in terms) > 0:
            raise ConfigError("normalize=true needs a positive total weight")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.init)

    @property
    def tags(self) -> tuple[str, ...]:
        return CRAFT_VARIANTS[self.output_format]

    def _needs_judge(self) -> bool:
        return self._judge is not None and ("judge" in self.terms or self.component == "judge")

    def score(self, completion: Any, answers: Sequence[str] | str, gold_labels: Sequence[str],
              labels: Sequence[str] | None = None, *, question: str = "",
              passages: Sequence[Any] | None = None, answerable: bool = True) -> CraftBreakdown:
        """The reward of one completion with its terms (the judge, when configured, audits it alone);
        ``answerable`` False scores an unanswerable row (see the module docstring)."""
        return self._breakdowns([(completion, answers, gold_labels, question, passages, answerable)])[0]

    def _breakdowns(self, rows: Sequence[tuple[Any, Any, Any, Any, Any, bool]]) -> list[CraftBreakdown]:
        has_gold = "gold_docs" in self.tags
        parse = FORMATS.get(self.output_format).parse
        parsed = []
        for completion, answers, gold, _, _, answerable in rows:
            text = completion_text(completion)
            p = parse(text)
            s = score_completion(text, answers, tuple(gold), parse=lambda *_a, _p=p, **_k: _p,  # parsed once
                                 answerable=answerable)
            parsed.append((text, s, p))
        verdicts: dict[int, Any] = {}
        if self._needs_judge():
            todo = [i for i, (_, s, _) in enumerate(parsed) if s.valid]  # the gate: no audit of a broken format
            items = [(str(rows[i][3] or ""), _passage_triples(rows[i][4]), parsed[i][0], self.output_format)
                     for i in todo]
            if items:
                verdicts = dict(zip(todo, self._judge.audit(items), strict=True))
        out = []
        w = self.weights
        for i, (_, s, p) in enumerate(parsed):
            gate = 1.0 if s.valid else 0.0
            answer = s.answer_f1 * gate if s.answer else 0.0
            evidence = s.citation_f1 * gate if has_gold else None
            boundary = boundary_check(p.cited, p.gold_docs) * gate if has_gold else None
            v = verdicts.get(i)
            judge = (v.score if v is not None else 0.0) if self._needs_judge() else None
            values = {"format": gate, "answer": answer, "evidence": evidence or 0.0, "boundary": boundary or 0.0,
                      "judge": judge or 0.0}
            total = sum(w[t] * values[t] for t in self.terms)
            if self.normalize:
                total /= sum(w[t] for t in self.terms)
            out.append(CraftBreakdown(total, gate, answer, evidence, boundary, judge, s.exact_match,
                                      s.answer_f1, s.citation_precision, s.citation_recall, s.valid, s.reason,
                                      dict(v.checks) if v is not None else None))
        return out

    def components(self, completions: Sequence[Any], answers: Sequence[Any] | None = None,
                   gold_labels: Sequence[Any] | None = None, passages: Sequence[Any] | None = None, *,
                   question: Sequence[Any] | None = None, reward_model: Sequence[Any] | None = None,
                   extra_info: Sequence[Any] | None = None,
                   answerable: Sequence[Any] | None = None, golden_answers: Sequence[Any] | None = None,
                   id: Sequence[Any] | None = None) -> list[CraftBreakdown]:
        """Per-completion breakdowns of a batch (one judge call for the whole batch)."""
        n = check_columns(completions, {"gold_labels": gold_labels, "passages": passages, "question": question,
                                        "extra_info": extra_info, "answerable": answerable}, who="the CRAFT reward")
        texts = completion_texts(completions)
        golds = batch_answers(n, answers, reward_model, golden_answers, ids=id, who="the CRAFT reward")
        if self._needs_judge() and (passages is None or question is None):
            raise ConfigError("the CRAFT judge reads the `question` and `passages` columns; pass them (TRL passes "
                              "every dataset column with remove_unused_columns=False)")
        none = (None,) * n
        rows = [(c, gold, row_gold_labels(g, rm), q, p, row_answerable(ok, rm))
                for c, gold, g, q, p, rm, ok in zip(
            texts, golds, none if gold_labels is None else gold_labels,
            none if question is None else question, none if passages is None else passages,
            none if reward_model is None else reward_model, none if answerable is None else answerable,
            strict=True)]
        return self._breakdowns(rows)

    def __call__(self, completions: Sequence[Any], answers: Sequence[Any] | None = None,
                 gold_labels: Sequence[Any] | None = None, passages: Sequence[Any] | None = None, *,
                 question: Sequence[Any] | None = None, reward_model: Sequence[Any] | None = None,
                 extra_info: Sequence[Any] | None = None, answerable: Sequence[Any] | None = None,
                 golden_answers: Sequence[Any] | None = None,
                 log_metric: Callable[[str, float], None] | None = None,
                 log_extra: Callable[[str, list], None] | None = None, **kwargs: Any) -> list[float]:
        """TRL reward function: one float per completion (``self.component`` of each breakdown; 0.0 where the
        component does not apply)."""
        breakdowns = self.components(completions, answers, gold_labels, passages, question=question,
                                     reward_model=reward_model, extra_info=extra_info, answerable=answerable,
                                     golden_answers=golden_answers, id=kwargs.get("id"))
        if self.log_components and breakdowns:
            self._log(breakdowns, log_metric, log_extra)
        component = self.component
        return [float(getattr(b, component) or 0.0) for b in breakdowns]

    def _log(self, breakdowns: list[CraftBreakdown], log_metric: Callable | None, log_extra: Callable | None) -> None:
        n = len(breakdowns)
        if log_metric is not None:
            for attr in ("format", "answer", "evidence", "boundary", "judge", "exact_match", "answer_f1",
                         "format_valid"):
                vals = [getattr(b, attr) for b in breakdowns]
                if all(v is None for v in vals):
                    continue
                log_metric(f"craft/{attr}", sum(float(v or 0.0) for v in vals) / n)
        if log_extra is not None:
            log_extra("craft/format_reason", [b.format_reason or "" for b in breakdowns])


def _passage_triples(passages: Any) -> list[tuple[str, str, str]]:
    """(label, title, text) of each passage of a row (the ``passages`` column)."""
    out = []
    for p in passages or ():
        if isinstance(p, Mapping):
            out.append((str(p.get("label", "")), str(p.get("title", "")), str(p.get("text", ""))))
    return out


@dataclass(frozen=True)
class CraftFormatReward(CraftReward):
    """R_fmt alone (Eq. 3): 1 for a completion in the variant's format, else 0."""

    log_components: bool = False
    __name__: ClassVar[str] = "craft_format"
    component: ClassVar[str] = "format"


@dataclass(frozen=True)
class CraftAnswerReward(CraftReward):
    """R_ans alone (Eq. 5): answer SoftF1, gated by the format."""

    log_components: bool = False
    __name__: ClassVar[str] = "craft_answer"
    component: ClassVar[str] = "answer"


@dataclass(frozen=True)
class CraftEvidenceReward(CraftReward):
    """R_gold alone (Eq. 4): F1 of the ``<gold_docs>`` numbers against the gold documents', gated (v1, v2)."""

    log_components: bool = False
    __name__: ClassVar[str] = "craft_evidence"
    component: ClassVar[str] = "evidence"


@dataclass(frozen=True)
class CraftBoundaryReward(CraftReward):
    """Algorithm 1's check B computed without a judge: documents cited in ``<reason>`` are a non-empty subset of
    ``<gold_docs>``, gated (v1, v2)."""

    log_components: bool = False
    __name__: ClassVar[str] = "craft_boundary"
    component: ClassVar[str] = "boundary"


@dataclass(frozen=True)
class CraftJudgeReward(CraftReward):
    """R_faith alone (Eqs. 6-7): the LLM judge's audit of a format-valid trace, 0 for a broken format."""

    log_components: bool = False
    __name__: ClassVar[str] = "craft_judge"
    component: ClassVar[str] = "judge"

    def __post_init__(self) -> None:
        if self.judge is None:
            raise ConfigError("craft-judge needs a judge", hint="give judge={backend: openai, model: Qwen3-Max, "
                              "backend_args: {base_url: ...}} (or another generation backend)")
        super().__post_init__()
