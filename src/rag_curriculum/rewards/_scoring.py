"""One completion scorer, shared by the reward, the partition and the evaluation.

:func:`score_completion` parses one completion with the parser of its row's output format and scores it:
exact match and answer F1 (maximum over the gold answer and its aliases, the official SQuAD / HotpotQA
definitions of :mod:`rag_curriculum._metrics`), citation precision / recall / F1 over citation keys, the number of distinct
labels cited and of those that are not gold, and whether the format holds (and why not). Each caller keeps its
own policy on top: the RAG-RL reward (section 3.1) weighs the components and gives an empty answer nothing; the
partition takes the answer F1 of each sample (pass@k, section 3.2); the evaluation zeroes an invalid sample with
``strict_format`` and takes joint F1 (section 4.5).

Unanswerable rows (``answerable`` false: no gold passage shown, the expected answer is the abstention answer,
``curriculum build --unanswerable-fraction``) score citations the other way round: citing nothing is correct
(precision, recall and F1 are 1) provided the completion states an answer, and every distinct label cited is an
incorrect citation (precision, recall and F1 are 0). :func:`is_abstention` tells whether a final answer is the
abstention answer (normalised as the official exact match).

Passage labels are read one way, :func:`passage_labels` (``passages``, else ``extra_info["labels"]``), and an
output format is found one way, :func:`get_parser`: a row's ``template`` names its format (``rag-rl`` when the
row has none), and a name no format is registered under is an error naming it, never a silent fallback to
another parser (which would score every completion of a different format as invalid).

>>> s = score_completion("<reasoning></reasoning><answer>Final answer: the Sun\\nSupporting passages: Sun, Moon"
...                      "</answer>", ["Sun"], ["Sun"])
>>> s.answer, s.exact_match, s.answer_f1, s.citation_precision, s.citation_recall, s.num_incorrect, s.valid
('the Sun', 1.0, 1.0, 0.5, 1.0, 1, True)
>>> u = score_completion("<reasoning></reasoning><answer>Final answer: Unanswerable.\\nSupporting passages:</answer>",
...                      ["unanswerable"], [], answerable=False)
>>> u.exact_match, u.citation_recall, u.num_incorrect, is_abstention(u.answer)
(1.0, 1.0, 0, True)
>>> get_parser("rag-rll")
Traceback (most recent call last):
...
rag_curriculum.errors.UnknownNameError: no output format is registered for the template 'rag-rll'; did you mean 'rag-rl'? Known: craft-v1, craft-v2, craft-v3, craft-v4, craft-v5, rag-rl, search-r1, search-r1-original
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .._metrics import _label_keys, _normalized_answers, _scores_normalized, citation_key, normalize_answer
from ..errors import ConfigError, UnknownNameError
from ..prompts import ABSTENTION_ANSWER
from ._columns import passage_labels
from ._formats import FORMATS

__all__ = ["ABSTENTION_ANSWER", "CompletionScore", "check_abstention_answer", "get_parser", "is_abstention",
           "passage_labels", "score_completion"]

DEFAULT_FORMAT = "rag-rl"


_new = tuple.__new__  # builds a CompletionScore without NamedTuple's keyword-handling __new__ (the reward's hot path)


class CompletionScore(NamedTuple):
    """What one completion holds and how it scores (every score a fraction in [0, 1])."""

    answer: str
    citations: tuple[str, ...]
    valid: bool
    reason: str | None
    exact_match: float
    answer_f1: float
    citation_precision: float
    citation_recall: float
    citation_f1: float
    num_cited: int
    num_incorrect: int


def get_parser(template: str | None) -> Callable[..., Any]:
    """The parser of the output format ``template`` names (``rag-rl`` when None or empty).

    Args:
        template: a template's (and so an output format's) name, or None.

    Returns:
        The format's parser: ``parse(text, labels=None, *, max_chars=...)`` returning a :class:`ParsedCompletion`.

    Raises:
        UnknownNameError: no output format registered for ``template`` (naming the closest known name).
    """
    name = template or DEFAULT_FORMAT
    if name not in FORMATS:
        close = difflib.get_close_matches(name, FORMATS.names(), n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(
            f"no output format is registered for the template {name!r}{guess} Known: {', '.join(FORMATS.names())}",
            hint="register one with rag_curriculum.rewards.register_format(OutputFormat(NAME, parse, "
                 f"template_name=NAME)) before scoring, or build the rows with --template {DEFAULT_FORMAT}")
    return FORMATS.get(name).parse


def check_abstention_answer(answer: Any, *, name: str = "abstention_answer") -> str:
    """``answer`` if it can serve as the abstention answer (a string that normalises to something), else a
    :class:`~rag_curriculum.errors.ConfigError`."""
    if not isinstance(answer, str) or not normalize_answer(answer):
        raise ConfigError(f"{name} = {answer!r}: the abstention answer must be text that stays non-empty after "
                          "answer normalisation (lowercase, no punctuation, no articles)",
                          hint=f"use the default {ABSTENTION_ANSWER!r} or a phrase such as 'insufficient information'")
    return answer


def is_abstention(answer: str, abstention_answer: str = ABSTENTION_ANSWER) -> bool:
    """Whether a parsed final answer abstains: it equals ``abstention_answer`` once both are normalised as the
    official exact match (``"Unanswerable."`` abstains, ``"It is unanswerable"`` does not).

    >>> is_abstention("Unanswerable."), is_abstention("the answer is unanswerable"), is_abstention("")
    (True, False, False)
    """
    return bool(answer) and normalize_answer(answer) == _normalized_answers((abstention_answer,))[0]


def score_completion(text: str, answers: Sequence[str] | str, gold_labels: Sequence[str] | None = None,
                     labels: Sequence[str] | None = None, *, parse: Callable[..., Any] | None = None,
                     max_chars: int | None = None, answerable: bool = True) -> CompletionScore:
    """Parse ``text`` with ``parse`` (the RAG-RL parser by default), given ``labels`` (the labels the parser may
    resolve citations to; None: none) and ``max_chars`` (None: the parser's default, 4000 characters for
    RAG-RL), and score it against ``answers`` (the gold answer and its aliases) and ``gold_labels``. Without
    ``gold_labels`` the citation scores are 0 and not computed (answer-only scoring). With ``answerable`` false
    (an unanswerable row) the citation scores are 1 when nothing is cited and an answer is stated, else 0, and
    every cited label is incorrect.

    Args:
        text: the completion's text.
        answers: the gold answer and its aliases (or one answer as a string).
        gold_labels: the gold passages' labels (None: answer-only scoring).
        labels: every passage label of the row.
        parse: the output format's parser (None: RAG-RL's, :func:`parse_completion`).
        max_chars: the parser's length bound (None: its default).
        answerable: False for an unanswerable row.

    Returns:
        The parsed answer and citations, the format's validity and reason, and the scores: exact match, answer
        F1, citation precision / recall / F1 (fractions in [0, 1]), citations and incorrect citations counted.

    Examples:
        >>> from rag_curriculum.rewards import score_completion
        >>> text = "<reasoning>r</reasoning><answer>Final answer: Rome\\nSupporting passages: Ada, Paris</answer>"
        >>> s = score_completion(text, ["Rome"], ["Ada", "Rome"], ["Ada", "Rome", "Paris"])
        >>> s.exact_match, s.citation_precision, s.citation_recall, s.num_incorrect
        (1.0, 0.5, 0.5, 1)
    """
    if max_chars is None:
        parsed = (parse or get_parser(None))(text, labels)
    else:
        parsed = (parse or get_parser(None))(text, labels, max_chars=max_chars)
    answer = parsed.answer
    golds = _normalized_answers((answers,) if isinstance(answers, str) else tuple(answers))
    if answer:
        em, f1 = _scores_normalized(answer, golds)
    else:  # what _scores_normalized gives an empty prediction: EM only against a gold that normalises to ""
        em, f1 = (1.0 if "" in golds else 0.0), 0.0
    if gold_labels is None:
        return _new(CompletionScore, (answer, parsed.citations, bool(parsed.valid), parsed.reason, em, f1,
                                      0.0, 0.0, 0.0, 0, 0))
    # citation precision / recall / F1 over distinct citation keys (_metrics.citation_scores, inlined: this is
    # the reward's hot path)
    n_gold = len(gold_keys := _label_keys(gold_labels if type(gold_labels) is tuple else tuple(gold_labels)))
    cited = {k for k in map(citation_key, parsed.citations) if k}
    n_cited = len(cited)
    if not answerable:  # nothing to cite: citing nothing (with an answer stated) is right, any citation is wrong
        c = 1.0 if not n_cited and answer else 0.0
        return _new(CompletionScore, (answer, parsed.citations, bool(parsed.valid), parsed.reason, em, f1,
                                      c, c, c, n_cited, n_cited))
    tp = len(cited & gold_keys)
    precision = tp / n_cited if n_cited else 0.0
    recall = tp / n_gold if n_gold else 0.0
    cf1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return _new(CompletionScore, (answer, parsed.citations, bool(parsed.valid), parsed.reason, em, f1,
                                  precision, recall, cf1, n_cited, n_cited - tp))
