"""Reading what trainers hand to reward functions: completion texts and the row columns of the shards.

TRL passes completions as strings (standard) or message lists (conversational), and every dataset column as a
list with one entry per completion; verl passes one row's ``ground_truth`` and ``extra_info``. Parquet readers may
hand lists back as tuples or NumPy arrays. These helpers accept all of those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._gold import GOLD_KEYS, NoGoldAnswerError, gold_answers
from ..errors import ConfigError

__all__ = ["GOLD_KEYS", "NoGoldAnswerError", "batch_answers", "completion_text", "gold_answers", "passage_labels", "row_gold",
           "verl_answers",
           "row_answerable", "row_answers", "row_gold_labels"]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    # multimodal content parts: [{"type": "text", "text": ...}, ...]
    return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, a message, or a list of messages (the last assistant message).

    >>> completion_text("<answer>...</answer>"), completion_text([{"role": "assistant", "content": "hi"}])
    ('<answer>...</answer>', 'hi')
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence) and completion:
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                return _content_text(message.get("content"))
        last = completion[-1]
        return _content_text(last.get("content") if isinstance(last, Mapping) else last)
    return ""


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if type(value) is list:
        return value
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _ground_truth(reward_model: Any) -> Mapping:
    if isinstance(reward_model, Mapping):
        gt = reward_model.get("ground_truth", reward_model)
        return gt if isinstance(gt, Mapping) else {"answers": gt}
    return {}


def row_answers(answers: Any = None, reward_model: Any = None, golden_answers: Any = None, *,
                where: str = "") -> list[str]:
    """:func:`gold_answers` (the name the rewards used first)."""
    return gold_answers(answers, reward_model, golden_answers, where=where)


def row_gold(row: Mapping[str, Any]) -> list[str]:
    """:func:`gold_answers` of a whole row (a dict of its columns), named by its ``id`` when it has one."""
    rid = row.get("id")
    return gold_answers(row.get("answers"), row.get("reward_model"), row.get("golden_answers"),
                        where=f"row id {rid!r}" if rid is not None else "")


def verl_answers(ground_truth: Any, data_source: Any = None, extra_info: Any = None) -> list[str]:
    """:func:`gold_answers` of the ``reward_model.ground_truth`` verl hands a reward function (the toolkit's
    ``{"answers": [...]}``, Search-R1's ``{"target": [...]}``, FlashRAG's ``{"golden_answers": [...]}``, or the
    answers themselves); a row without any is an error naming its ``data_source`` and ``extra_info.index``.

    >>> verl_answers({"target": ["Paris"]}, "nq"), verl_answers("Paris")
    (['Paris'], ['Paris'])
    """
    where = f"data_source {data_source!r}" if data_source is not None else "a verl row"
    if isinstance(extra_info, Mapping) and extra_info.get("index") is not None:
        where += f", extra_info.index {extra_info.get('index')}"
    return gold_answers(reward_model={"ground_truth": ground_truth}, where=where)


def batch_answers(n: int, answers: Sequence[Any] | None = None, reward_model: Sequence[Any] | None = None,
                  golden_answers: Sequence[Any] | None = None, *, ids: Sequence[Any] | None = None,
                  who: str = "the reward") -> list[list[str]]:
    """:func:`gold_answers` of each of ``n`` rows from the columns a trainer passes (one entry per completion; an
    absent column is None). A column of another length, no answer column at all, or a row without a gold answer
    is an error naming the row (its position in the batch, and its ``id`` when the ``id`` column is there)."""
    cols = (("answers", answers), ("reward_model", reward_model), ("golden_answers", golden_answers))
    for name, col in cols + (("id", ids),):
        if col is not None and len(col) != n:
            raise ConfigError(f"got {n} completions but {len(col)} entries in column {name!r}")
    if all(col is None for _, col in cols):
        raise ConfigError(f"{who} needs the gold answers and got none of the columns answers, golden_answers, "
                          "reward_model (with ground_truth.answers or Search-R1's ground_truth.target)",
                          hint="with TRL keep remove_unused_columns=False; with verl, keep reward_model")
    out = []
    for i in range(n):
        where = f"completion {i} of the batch" + (f" (row id {ids[i]!r})" if ids is not None else "")
        out.append(gold_answers(*(None if col is None else col[i] for _, col in cols), where=where))
    return out


def row_gold_labels(gold_labels: Any = None, reward_model: Any = None) -> list[str]:
    """The gold citation labels: the ``gold_labels`` column, else ``reward_model.ground_truth.gold_labels``."""
    if gold_labels is not None:
        return _str_list(gold_labels)
    return _str_list(_ground_truth(reward_model).get("gold_labels"))


def row_answerable(answerable: Any = None, reward_model: Any = None) -> bool:
    """Whether the row is answerable: the ``answerable`` column, else ``reward_model.ground_truth.answerable``;
    True when neither says (shards built before unanswerable rows existed, or a null).

    >>> row_answerable(), row_answerable(False), row_answerable(None, {"ground_truth": {"answerable": False}})
    (True, False, False)
    """
    if answerable is None:
        answerable = _ground_truth(reward_model).get("answerable")
    return True if answerable is None else bool(answerable)


def passage_labels(passages: Any = None, extra_info: Any = None) -> list[str] | None:
    """Every passage label of the row: from ``passages`` (``[{label, ...}]``), else ``extra_info["labels"]``: the one
    way the reward and the evaluation read them."""
    if passages is not None:
        try:
            return [p["label"] for p in passages]
        except (TypeError, KeyError, IndexError):
            return [p["label"] if isinstance(p, Mapping) else str(p) for p in passages]
    if isinstance(extra_info, Mapping) and extra_info.get("labels") is not None:
        return _str_list(extra_info["labels"])
    return None
