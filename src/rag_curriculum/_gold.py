"""The one reader of a row's gold answers, wherever a trainer, a data file or the toolkit keeps them: the toolkit's
``answers``, Search-R1's ``reward_model.ground_truth.target`` and FlashRAG's ``golden_answers``. The rewards (TRL's,
verl's, the toolkit's), the evaluation, the partition and the loaders all read answers through it, so a row scores
the same everywhere, and a row without a gold answer is an error, never a silent 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import DataError


def _ground_truth(reward_model: Any) -> Mapping:
    if isinstance(reward_model, Mapping):
        gt = reward_model.get("ground_truth", reward_model)
        return gt if isinstance(gt, Mapping) else {"answers": gt}
    return {}


#: Where the gold answers of a row are looked for, in this order: the toolkit's ``answers`` column, FlashRAG's
#: ``golden_answers`` column, then inside ``reward_model.ground_truth`` the toolkit's ``answers``, Search-R1's
#: ``target`` (``scripts/data_process/nq_search.py``) and FlashRAG's ``golden_answers`` (a ground truth that is
#: itself a string or a list is the answers).
GOLD_KEYS = ("answers", "golden_answers", "reward_model.ground_truth.answers", "reward_model.ground_truth.target",
             "reward_model.ground_truth.golden_answers")


class NoGoldAnswerError(DataError):
    """A row with no gold answer under any of :data:`GOLD_KEYS` (or only empty ones, or one that is not text):
    scoring it would give 0 whatever the model wrote."""

    hint = ("give every row its gold answers as a non-empty list of strings: the toolkit's `answers` column, "
            "FlashRAG's `golden_answers`, or Search-R1's `reward_model.ground_truth.target`")


def _answer_list(value: Any, key: str, where: str) -> list[str] | None:
    """The non-empty answers of one key's value (None when the key holds nothing); a value that is not text, or a
    list holding something else than text, is an error naming the key."""
    if value is None:
        return None
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        raise NoGoldAnswerError(f"{key} holds {_show(value)} ({type(value).__name__}), not an answer or a list of "
                                "answers", kind="wrong_type", record=where or None, field=key)
    else:
        items = list(value)
    out = []
    for j, a in enumerate(items):
        if not isinstance(a, str):
            raise NoGoldAnswerError(f"{key}[{j}] is {_show(a)} ({type(a).__name__}), not a string",
                                    kind="wrong_type", record=where or None, field=key)
        if a.strip():
            out.append(str(a))
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def gold_answers(answers: Any = None, reward_model: Any = None, golden_answers: Any = None, *,
                 where: str = "") -> list[str]:
    """The gold answer and its aliases of one row, from the first of :data:`GOLD_KEYS` that holds any: the one
    reader of gold answers of every reward (TRL's, verl's, the toolkit's) and of the evaluation. Rows of the
    toolkit, Search-R1's data files (``reward_model.ground_truth.target``) and FlashRAG's (``golden_answers``) all
    read the same way. A row with none raises :class:`NoGoldAnswerError` naming the row (``where``) and the keys
    looked for: never a silent score of 0.

    >>> gold_answers(["Paris", "Paris, France"])
    ['Paris', 'Paris, France']
    >>> gold_answers(reward_model={"style": "rule", "ground_truth": {"target": ["Paris"]}})
    ['Paris']
    >>> gold_answers(reward_model={"ground_truth": {"target": "Paris"}}), gold_answers(golden_answers=("Paris",))
    (['Paris'], ['Paris'])
    >>> gold_answers(reward_model={"ground_truth": {"gold_labels": ["A"]}}, where="row 3")
    Traceback (most recent call last):
    ...
    rag_curriculum._gold.NoGoldAnswerError: row 3: no gold answer under answers, golden_answers, reward_model.ground_truth.answers, reward_model.ground_truth.target, reward_model.ground_truth.golden_answers
    """
    gt = _ground_truth(reward_model)
    for key, value in (("answers", answers), ("golden_answers", golden_answers),
                       ("reward_model.ground_truth.answers", gt.get("answers")),
                       ("reward_model.ground_truth.target", gt.get("target")),
                       ("reward_model.ground_truth.golden_answers", gt.get("golden_answers"))):
        got = _answer_list(value, key, where)
        if got:
            return got
    raise NoGoldAnswerError(f"no gold answer under {', '.join(GOLD_KEYS)}", kind="no_gold_answer",
                            record=where or None)


TARGET = "reward_model.ground_truth.target"


def read_target(value: Any, *, where: str = "", normalize: Callable[[str], str] | None = None) -> str | list[str]:
    """Search-R1's ``reward_model.ground_truth.target`` as its reward reads it (``em_check``: a string is one answer,
    a list is every answer, each entry kept as it is). One that is null, empty, holds only empty strings, or is not
    text raises :class:`NoGoldAnswerError` naming ``where`` and the field: Search-R1's reward would crash on it, or
    score every answer 0. With ``normalize`` (the answer normalisation, ``normalize_answer``: the callers pass it),
    an entry it makes empty (``"the"``, ``"..."``) counts as empty: a target of only such entries is refused too,
    as the reward would score an empty answer (``<answer> a </answer>``) 1.0 against it.

    >>> read_target(["Paris", ""]), read_target("Paris")
    (['Paris', ''], 'Paris')
    >>> read_target([], where="row 3")
    Traceback (most recent call last):
    ...
    rag_curriculum._gold.NoGoldAnswerError: row 3, field 'reward_model.ground_truth.target': holds []: no answer to compare with (Search-R1's reward would score every answer 0)
    """
    if isinstance(value, str):
        if not value.strip():
            raise NoGoldAnswerError("an empty string: Search-R1's reward would score every answer 0",
                                    kind="no_gold_answer", record=where or None, field=TARGET)
        if normalize is not None:
            check_normalised([value], normalize, where=where)
        return value
    items = None
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif value is not None and not isinstance(value, (bytes, Mapping)) and getattr(value, "ndim", None) == 1:
        items = list(value.tolist())  # a NumPy array (pandas and datasets' numpy format)
    if items is None:
        raise NoGoldAnswerError(f"holds {_show(value)} ({type(value).__name__}), not a list of answers",
                                kind="wrong_type", record=where or None, field=TARGET)
    for j, a in enumerate(items):
        if not isinstance(a, str):
            raise NoGoldAnswerError(f"entry {j} is {_show(a)} ({type(a).__name__}), not a string",
                                    kind="wrong_type", record=where or None, field=TARGET)
    if not any(a.strip() for a in items):
        raise NoGoldAnswerError(f"holds {_show(items)}: no answer to compare with (Search-R1's reward would score "
                                "every answer 0)", kind="no_gold_answer", record=where or None, field=TARGET)
    if normalize is not None:
        check_normalised(items, normalize, where=where)
    return items


def check_normalised(answers: list[str], normalize: Callable[[str], str], *, where: str = "",
                     field: str = TARGET) -> None:
    """Refuse gold answers none of which survives the answer normalisation ``normalize`` (``["the"]``, ``["..."]``):
    :class:`NoGoldAnswerError` naming ``where`` and ``field``, as for blank ones, since an empty answer (``<answer> a
    </answer>``) would equal them and score 1.0."""
    if not any(normalize(a) for a in answers):
        raise NoGoldAnswerError(f"holds {_show(answers)}: no answer once normalised (lower case, punctuation and "
                                "articles dropped), so an empty answer such as '<answer> a </answer>' would score "
                                "1.0", kind="no_gold_answer", record=where or None, field=field)


def surviving(answers: str | list[str], normalize: Callable[[str], str]) -> str | list[str]:
    """A target's answers without those the normalisation ``normalize`` empties (``"the"``, ``""``, ``"..."``),
    against which an empty answer (``<answer> a </answer>``) would score 1.0: the reward's answers (a string, one
    answer, as it is; a target of only such answers is refused by :func:`check_normalised`).

    >>> from rag_curriculum._metrics import normalize_answer
    >>> surviving(["Paris", "the", ""], normalize_answer), surviving("Paris", normalize_answer)
    (['Paris'], 'Paris')
    """
    return answers if isinstance(answers, str) else [a for a in answers if normalize(a)]


__all__ = ["GOLD_KEYS", "TARGET", "NoGoldAnswerError", "check_normalised", "gold_answers", "read_target",
           "surviving"]
