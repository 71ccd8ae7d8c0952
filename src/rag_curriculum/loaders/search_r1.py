"""Search-R1's data files: the Parquet that its ``scripts/data_process/nq_search.py``,
``qa_search_train_merge.py`` and ``qa_search_test_merge.py`` write (``train.parquet`` / ``test.parquet``), one row
per question::

    id              FlashRAG's id ("train_0"); missing: ``extra_info.index`` (the row's position in its set)
    question        the question, stripped, with a "?" appended when it had none; missing: read from ``prompt``
                    (the text after its last "Question:", :func:`question_from_prompt`)
    golden_answers  the answer and its aliases (FlashRAG's column, kept by the script)
    data_source     the set the row comes from (nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique, bamboogle)
    prompt          [{"role": "user", "content": make_prefix(question)}]
    ability         "fact-reasoning"
    reward_model    {"style": "rule", "ground_truth": {"target": [answers]}}
    extra_info      {"split": "train" | "test", "index": row index within its source split}

Questions without passages (a search agent finds its own), so the rows are for search agents: ``curriculum build
--dataset search-r1`` writes them as the toolkit's rows (no passages, every level the same row; ``--template
search-r1-original`` gives the file's own prompt byte for byte), ``partition --agent`` and ``train`` with an
``agent:`` section use them, and ``eval --agent --data FILE.parquet`` asks them.

The answers are read by the toolkit's one gold reader (:func:`~rag_curriculum._gold.gold_answers`):
``reward_model.ground_truth.target`` (a list or a string), what Search-R1's own reward scores against, else
``golden_answers``, so a file that keeps only one of them reads the same. Rows whose two disagree take ``target``,
and the file's reading says so once (a warning naming the first such row and how many there are). The row's
``target`` itself is kept as it is (``Example.extra["target"]``; a string becomes a one-answer list) and written into
the built rows' ``reward_model.ground_truth.target``, the key Search-R1's reward reads; a ``target`` that is null,
empty, holds only empty strings or is not a list of strings is refused. A row keeps its own ``data_source`` (a merged
file holds several) and its id (``{data_source}-{id}`` in the rows). Errors name the file, the row and the field, as
the other loaders' do.

>>> SearchR1Loader.looks_like({"question": "q?", "data_source": "nq", "reward_model": {"ground_truth": {"target": ["a"]}}})
True
>>> SearchR1Loader.looks_like({"id": "test_0", "question": "q?", "golden_answers": ["a"]})  # FlashRAG's own layout
False
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._gold import TARGET, check_normalised, gold_answers, read_target, surviving
from .._metrics import normalize_answer
from ..errors import DataError
from ..records import Example
from ._base import DatasetLoader, RecordContext, json_type, require_question, show
from ._io import iter_records

#: The sets Search-R1's paper trains and evaluates on (its ``main_ppo.py`` routes these to its exact-match reward).
SEARCH_R1_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


class SearchR1Loader(DatasetLoader):
    """One row of Search-R1's Parquet to a question (no passages): see the module docstring."""

    name = "search-r1"
    hub_path = "PeterJinGo/nq_hotpotqa_train"
    license = "the licence of each source set (NQ: CC BY-SA 3.0; HotpotQA: CC BY-SA 4.0; ...)"
    release_files = "train.parquet / test.parquet written by Search-R1's scripts/data_process/nq_search.py"
    #: Rows without passages: a build writes them for search agents, not closed-context curricula.
    questions_only = True

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        if not isinstance(rec, Mapping) or ("question" not in rec and "prompt" not in rec):
            return False
        rm = rec.get("reward_model")
        gt = rm.get("ground_truth") if isinstance(rm, Mapping) else None
        return isinstance(gt, Mapping) and "target" in gt or ("data_source" in rec and "prompt" in rec
                                                              and "golden_answers" in rec)

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, split: str | None) -> Example:
        if not isinstance(rec, Mapping):
            raise ctx.error(f"the record is {json_type(rec)}, expected an object", kind="wrong_type")
        source = rec.get("data_source")
        if source is not None and not (isinstance(source, str) and source.strip()):
            raise ctx.error(f"expected a non-empty string, got {json_type(source)}", kind="wrong_type",
                            field="data_source")
        info = rec.get("extra_info")
        info = info if isinstance(info, Mapping) else {}
        rid = rec.get("id")
        if isinstance(rid, int) and not isinstance(rid, bool):
            rid = str(rid)
        own_id = rid is None and info.get("index") is not None  # a file without FlashRAG's ids: the row's index
        if own_id:
            rid = str(info["index"])
        if not isinstance(rid, str) or not rid.strip():
            raise ctx.error("missing" if rid is None else f"expected a string, got {json_type(rid)}",
                            kind="missing_field" if rid is None else "wrong_type", field="id")
        ctx.id = rid
        question = require_question(rec, ctx) if "question" in rec else question_from_prompt(rec, ctx)
        extra: dict[str, Any] = {"data_source": source or cls.name, "row_id": rid}
        rm = rec.get("reward_model")
        gt = rm.get("ground_truth") if isinstance(rm, Mapping) else None
        if isinstance(gt, Mapping) and "target" in gt:  # Search-R1's reward reads this key alone: kept as it is
            try:
                target = read_target(gt["target"], normalize=normalize_answer)
            except DataError as e:
                raise ctx.error(e.detail, kind="empty_answer" if e.kind == "no_gold_answer" else e.kind,
                                field=TARGET) from None
            kept = surviving(target, normalize_answer)
            if kept != target:  # an empty answer would score 1.0 against them (Search-R1's em_check)
                ctx.note("empty_alias", f"reward_model.ground_truth.target {show(target)}: "
                         f"{show([a for a in target if a not in kept])} left out (an empty answer would equal "
                         "them once normalised and score 1.0)")
            extra["target"] = [kept] if isinstance(kept, str) else kept
        try:  # target first: what Search-R1's reward scores against (its main_ppo.py reads ground_truth)
            answers = gold_answers(None, rec.get("reward_model"))
        except DataError as e:
            if e.kind != "no_gold_answer":
                raise ctx.error(str(e), kind=e.kind, field=e.field) from None
            answers = None
        try:
            golden = gold_answers(golden_answers=rec.get("golden_answers"))
        except DataError as e:
            if answers is None or e.kind != "no_gold_answer":
                raise ctx.error(str(e), kind="empty_answer" if e.kind == "no_gold_answer" else e.kind,
                                field=e.field or "golden_answers / reward_model.ground_truth.target") from None
            golden = None
        from_reward_model = answers is not None
        if answers is None:
            answers = golden
            try:  # (a target was checked above: the answers of a row without one are what its rows' target holds)
                check_normalised(answers, normalize_answer, field="golden_answers")
            except DataError as e:
                raise ctx.error(e.detail, kind="empty_answer", field="golden_answers") from None
        kept = surviving(answers, normalize_answer)
        if kept != answers and "target" not in extra:  # (a target's were told above)
            ctx.note("empty_golden_alias", f"golden_answers {show(answers)}: {show([a for a in answers if a not in kept])} "
                     "left out (an empty answer would equal them once normalised and score 1.0)")
        if from_reward_model and golden is not None and set(golden) != set(kept):
            ctx.note("gold_disagrees", f"golden_answers {show(golden)} differ from reward_model.ground_truth.target "
                     f"{show(kept)}: the gold answers are target's, what Search-R1's reward scores against")
        answers = kept
        row_split = info.get("split")
        # FlashRAG's ids restart in every set ("train_0" in nq and in hotpotqa): the set names the question (once:
        # an id already made of the set's name, "nq_0", is not prefixed again)
        qid = rid if (not source or rid.startswith((f"{source}-", f"{source}_"))) else f"{source}-{rid}"
        return Example(id=qid, source=cls.name,
                       split=row_split if isinstance(row_split, str) else split, question=question,
                       answers=list(dict.fromkeys(answers)), documents=[], extra=extra)


#: Where Search-R1's ``make_prefix`` puts the question: last, after this marker.
QUESTION_MARKER = "Question:"


def question_from_prompt(rec: Mapping[str, Any], ctx: RecordContext) -> str:
    """The question of a row without a ``question`` column: the text after the last ``Question:`` of the prompt's
    (last) user message, stripped; a user message without that marker is the question whole. Search-R1's
    ``make_prefix`` ends every prompt with ``Question: {question}\n``, so this gives its question back.

    >>> question_from_prompt({"prompt": [{"role": "user", "content": "Answer ... Question: who wrote Emma?"}]}, None)
    'who wrote Emma?'
    """
    prompt = rec.get("prompt")
    messages = list(prompt) if isinstance(prompt, (list, tuple)) or hasattr(prompt, "tolist") else None
    users = [m for m in messages or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if not isinstance(content, str) or not content.strip():
        raise ctx.error("no question: neither a 'question' column nor a user message in 'prompt'",
                        kind="missing_field", field="question")
    _, marker, after = content.rpartition(QUESTION_MARKER)
    question = (after if marker else content).strip()
    if not question:
        raise ctx.error(f"the prompt's user message has nothing after its last {QUESTION_MARKER!r}",
                        kind="empty_question", field="prompt")
    return question


def is_search_r1_file(path: str | Path) -> bool:
    """Whether a data file's first record is in Search-R1's layout."""
    for _, rec in iter_records(Path(path), lambda err: None):
        return SearchR1Loader.looks_like(rec)
    return False


__all__ = ["QUESTION_MARKER", "SEARCH_R1_SOURCES", "SearchR1Loader", "is_search_r1_file", "question_from_prompt"]
