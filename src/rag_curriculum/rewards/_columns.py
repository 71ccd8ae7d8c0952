"""Reading what trainers hand to reward functions: completion texts and the row columns of the shards.

TRL passes completions as strings (standard) or message lists (conversational), and every dataset column as a
list with one entry per completion; verl passes one row's ``ground_truth`` and ``extra_info``. Parquet readers may
hand lists back as tuples or NumPy arrays. These helpers accept all of those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["completion_text", "passage_labels", "row_answerable", "row_answers", "row_gold_labels"]


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


def row_answers(answers: Any = None, reward_model: Any = None) -> list[str]:
    """The gold answer and its aliases: the ``answers`` column, else ``reward_model.ground_truth.answers``."""
    if answers is not None:
        return _str_list(answers)
    return _str_list(_ground_truth(reward_model).get("answers"))


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
