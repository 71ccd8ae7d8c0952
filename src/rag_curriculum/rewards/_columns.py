"""Reading what trainers hand to reward functions: completion texts and the row columns of the shards.

TRL passes completions as strings (standard) or message lists (conversational), and every dataset column as a
list with one entry per completion; verl passes one row's ``ground_truth`` and ``extra_info``. Parquet readers may
hand lists back as tuples or NumPy arrays. These helpers accept all of those. :func:`log_means` is the way back:
a batch's breakdowns logged through TRL's ``log_metric``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._gold import GOLD_KEYS, NoGoldAnswerError, gold_answers
from ..errors import RewardInputError

__all__ = ["GOLD_KEYS", "NoGoldAnswerError", "RewardInputError", "batch_answers", "check_columns", "check_lengths",
           "completion_text", "completion_texts", "gold_answers", "log_means", "passage_labels", "row_answerable", "row_answers", "row_gold", "row_gold_labels",
           "trajectory_batch", "trajectory_record", "verl_answers"]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: What a ``trajectory`` entry holds (:meth:`~rag_curriculum.agents.Trajectory.to_dict`).
TRAJECTORY_HINT = ("pass the `trajectory` dicts the toolkit's SearchRollout returns (Trajectory.to_dict): segments "
                   "[{source: model|env, text}], searches [{query, ids, gold: [true|false]}], errors [str], answer")


def _bad(message: str, where: str, field: str) -> RewardInputError:
    return RewardInputError(message, kind="wrong_type", record=where or None, field=field,
                            hint=TRAJECTORY_HINT if field == "trajectory" else None)


def _items(value: Any) -> list[Any] | None:
    """A list of a sequence value (a list, a tuple, a NumPy array from a Parquet reader); None for anything else."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (str, bytes, Mapping)):
        return None
    tolist = getattr(value, "tolist", None)  # numpy.ndarray (pandas and datasets' numpy format hand these back)
    if callable(tolist) and getattr(value, "ndim", 1) == 1:
        got = tolist()
        return got if isinstance(got, list) else None
    return None


def _content_text(content: Any, where: str = "", field: str = "completions") -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    parts = _items(content)
    if parts is None or not all(isinstance(p, Mapping) for p in parts):
        raise _bad(f"a message's content is {_show(content)} ({type(content).__name__}), not text or a list of "
                   "content parts", where, field)
    # multimodal content parts: [{"type": "text", "text": ...}, ...]
    return "".join(str(p.get("text") or "") for p in parts)


def completion_text(completion: Any, *, where: str = "") -> str:
    """The text of one completion: a string, a message, or a list of messages (the last assistant message). Anything
    else (a number, None, a list of strings) is a :class:`~rag_curriculum.errors.RewardInputError` naming
    ``where`` (the completion's place in the batch), never read as an empty completion.

    >>> completion_text("<answer>...</answer>"), completion_text([{"role": "assistant", "content": "hi"}])
    ('<answer>...</answer>', 'hi')
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"), where)
    messages = _items(completion)
    if messages is None:
        raise _bad(f"a completion is {_show(completion)} ({type(completion).__name__}), not a string or a list of "
                   "chat messages", where, "completions")
    for j, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise _bad(f"message {j} of a completion is {_show(message)} ({type(message).__name__}), not a "
                       "{role, content} dict", where, "completions")
    for message in reversed(messages):
        if message.get("role", "assistant") == "assistant":
            return _content_text(message.get("content"), where)
    return _content_text(messages[-1].get("content"), where) if messages else ""


def completion_texts(completions: Any) -> list[str]:
    """The text of every completion of a batch (:func:`completion_text`, each named by its place on error)."""
    return [completion_text(c, where=f"completion {i} of the batch") for i, c in enumerate(completions)]


def check_columns(completions: Any, columns: Mapping[str, Any], *, who: str = "the reward") -> int:
    """The number of completions, after checking that ``completions`` is a sequence (not one string) and that
    every column given (not None) has one entry per completion; a :class:`RewardInputError` names the column."""
    if isinstance(completions, (str, bytes, Mapping)) or _items(completions) is None:
        raise RewardInputError(f"{who} got completions={_show(completions)} ({type(completions).__name__}), not a "
                               "list with one completion per row", kind="wrong_type", field="completions")
    n = len(completions)
    check_lengths(n, columns)
    return n


def check_lengths(n: int, columns: Mapping[str, Any]) -> None:
    """Every column given (not None) is a sequence with ``n`` entries (one per completion)."""
    for name, col in columns.items():
        if col is None:
            continue
        if isinstance(col, (str, bytes, Mapping)) or _items(col) is None:
            raise RewardInputError(f"column {name!r} is {_show(col)} ({type(col).__name__}), not a list with one "
                                   "entry per completion", kind="wrong_type", field=name)
        if len(col) != n:
            raise RewardInputError(f"got {n} completions but {len(col)} entries in column {name!r}",
                                   kind="wrong_length", field=name)


def trajectory_record(value: Any, *, where: str = "") -> dict[str, Any] | None:
    """One entry of the ``trajectory`` column (:meth:`~rag_curriculum.agents.Trajectory.to_dict`'s layout), checked
    and in plain Python: ``segments`` as ``{source, text}`` dicts (a ``Segment`` tuple is read too), ``searches`` as
    dicts with their ``gold`` flags a list of bools, ``errors`` a list of strings, ``answer`` a string or None. Lists
    may come as tuples or NumPy arrays (a trajectory read back with pandas). Anything of another shape is a
    :class:`RewardInputError` naming the key and its place, never skipped.

    >>> trajectory_record({"answer": "x", "segments": [("model", "<answer>x</answer>")]})["segments"]
    [{'source': 'model', 'text': '<answer>x</answer>'}]
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(f"the trajectory is {_show(value)} ({type(value).__name__}), not a dict", where, "trajectory")
    out = dict(value)
    segs = _trajectory_list(value, "segments", where)
    if segs is not None:
        norm = []
        for j, seg in enumerate(segs):
            if isinstance(seg, Mapping):
                source, text = seg.get("source"), seg.get("text")
            elif isinstance(seg, (tuple, list)) and len(seg) == 2:
                source, text = seg
            else:
                raise _bad(f"trajectory.segments[{j}] is {_show(seg)} ({type(seg).__name__}), not a {{source, text}} "
                           "dict", where, "trajectory")
            if source not in ("model", "env"):
                raise _bad(f"trajectory.segments[{j}].source is {_show(source)}: must be 'model' or 'env'", where,
                           "trajectory")
            if not isinstance(text, str):
                raise _bad(f"trajectory.segments[{j}].text is {_show(text)} ({type(text).__name__}), not text", where,
                           "trajectory")
            norm.append({"source": source, "text": text})
        out["segments"] = norm
    found = _trajectory_list(value, "searches", where)
    if found is not None:
        searches = []
        for j, x in enumerate(found):
            if not isinstance(x, Mapping):
                raise _bad(f"trajectory.searches[{j}] is {_show(x)} ({type(x).__name__}), not a search record (a "
                           "dict)", where, "trajectory")
            x = dict(x)
            if x.get("gold") is not None:
                flags = _items(x["gold"])
                if flags is None or not all(isinstance(f, bool) or type(f).__name__ in ("bool", "bool_") for f in flags):
                    raise _bad(f"trajectory.searches[{j}].gold is {_show(x['gold'])}, not a list of true/false "
                               "flags", where, "trajectory")
                x["gold"] = [bool(f) for f in flags]
            searches.append(x)
        out["searches"] = searches
    if value.get("errors") is not None:
        errors = _items(value["errors"])
        if errors is None or not all(isinstance(e, str) for e in errors):
            raise _bad(f"trajectory.errors is {_show(value['errors'])}, not a list of error types", where,
                       "trajectory")
        out["errors"] = errors
    answer = value.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise _bad(f"trajectory.answer is {_show(answer)} ({type(answer).__name__}), not text or null", where,
                   "trajectory")
    return out


def _trajectory_list(value: Mapping, key: str, where: str) -> list[Any] | None:
    """A trajectory's ``key`` as a list (None: absent or null); anything else is a :class:`RewardInputError`."""
    if value.get(key) is None:
        return None
    items = _items(value[key])
    if items is None:
        raise _bad(f"trajectory.{key} is {_show(value[key])}, not a list", where, "trajectory")
    return items


def trajectory_column(trajectory: Any, n: int) -> list[dict[str, Any] | None]:
    """Every entry of a ``trajectory`` column (None: the column is absent) through :func:`trajectory_record`."""
    if trajectory is None:
        return [None] * n
    return [trajectory_record(t, where=f"completion {i} of the batch") for i, t in enumerate(_items(trajectory) or [])]


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
    check_lengths(n, dict(cols + (("id", ids),)))
    if all(col is None for _, col in cols):
        raise RewardInputError(f"{who} needs the gold answers and got none of the columns answers, golden_answers, "
                               "reward_model (with ground_truth.answers or Search-R1's ground_truth.target)",
                               kind="missing_field", field="answers",
                               hint="with TRL keep remove_unused_columns=False; with verl, keep reward_model")
    out = []
    for i in range(n):
        where = f"completion {i} of the batch" + (f" (row id {ids[i]!r})" if ids is not None else "")
        out.append(gold_answers(*(None if col is None else col[i] for _, col in cols), where=where))
    return out


def trajectory_batch(completions: Any, answers: Sequence[Any] | None = None,
                     reward_model: Sequence[Any] | None = None, golden_answers: Sequence[Any] | None = None,
                     trajectory: Sequence[Any] | None = None, *, ids: Sequence[Any] | None = None,
                     who: str = "the reward") -> list[tuple[str, list[str], dict[str, Any] | None]]:
    """A trajectory reward's batch, a row per completion: its text, its gold answers (:func:`batch_answers`) and its
    ``trajectory`` record (:func:`trajectory_column`: None without the column), every column checked against the
    completions' count first (:func:`check_columns`)."""
    n = check_columns(completions, {"trajectory": trajectory}, who=who)
    texts = completion_texts(completions)
    golds = batch_answers(n, answers, reward_model, golden_answers, ids=ids, who=who)
    return list(zip(texts, golds, trajectory_column(trajectory, n), strict=True))


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


def log_means(log_metric: Callable[[str, float], None], prefix: str, breakdowns: Sequence[Any],
              attrs: Sequence[str]) -> None:
    """Each of ``attrs``' mean over a batch's ``breakdowns``, logged as ``prefix/attr``; a None counts as 0, and an
    attribute None throughout (a term not computed) is not logged.

    >>> from types import SimpleNamespace as B
    >>> log_means(lambda k, v: print(k, v), "r", [B(a=1, b=None), B(a=False, b=None)], ("a", "b"))
    r/a 0.5
    """
    n = len(breakdowns)
    for attr in attrs:
        vals = [getattr(b, attr) for b in breakdowns]
        if all(v is None for v in vals):
            continue
        log_metric(f"{prefix}/{attr}", sum(float(v or 0.0) for v in vals) / n)
