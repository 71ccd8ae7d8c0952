"""``search-r1``: Search-R1's own reward, bit for bit, for reproducing its published numbers.

Search-R1 (PeterGriffinJin/Search-R1, ``verl/utils/reward_score/qa_em.py``, ``compute_score_em``; its reward manager in
``verl/trainer/main_ppo.py``) scores a trajectory this way:

1. **the string**: the reward manager decodes the prompt's tokens *and* the response's tokens together,
   ``tokenizer.decode(prompt_ids + response_ids)``, special tokens kept (no ``skip_special_tokens``): the chat
   template's text, the prompt, every turn of the model and every ``<information>`` block;
2. **the answer** (``extract_solution``): every ``<answer>(.*?)</answer>`` match of that whole string
   (``re.DOTALL``, wherever it stands: inside ``<think>``, inside ``<information>``, in the prompt); *fewer than two
   matches* give no answer, otherwise the *last* one, stripped. The prompts of Search-R1 and of the toolkit hold
   two matches already (``inside <answer> and </answer>`` and the example ``<answer> Beijing </answer>``), so a
   response with one answer is read, and a response with none is read as the prompt's own example;
3. **the score**: no answer: 0; the answer equal to a gold answer after SQuAD normalisation (``em_check``: lower
   case, ASCII punctuation dropped, articles dropped, whitespace collapsed; against each entry of
   ``reward_model.ground_truth.target``, a string being one answer): ``score`` (1.0); otherwise ``format_score``
   (0.0 in Search-R1's runs: ``RewardManager(tokenizer, num_examine=0)``).

:func:`search_r1_score` is that computation on a string; :class:`SearchR1Reward` is it as a TRL reward function
(registered as ``search-r1``), which builds the string from the prompt and the completion as the reward manager
does (:func:`search_r1_sequence`); the verl wing has ``compute_search_r1_score`` and a reward manager that decodes as
Search-R1's does (:mod:`rag_curriculum.verl.reward_manager`); ``curriculum eval --agent search-r1 --reward search-r1``
reports it beside EM and F1. The toolkit's default ``search-em`` reads a trajectory more strictly (the answer the
rollout accepted, never the prompt's; a single ``<answer>`` is an answer); docs/search-agents.md lists, case by
case, where the two differ.

The gold answers are ``reward_model.ground_truth.target`` as it is (the key ``compute_score_em`` reads; the rows
the toolkit builds carry it), else the toolkit's gold reader (``answers``, ``golden_answers``); a ``target`` that is
empty, holds no non-empty answer, or is neither a string nor a list of strings is refused, naming the row and the
field, as is a row without any gold answer, and a ``target`` none of whose answers survives the normalisation
(``["the"]``: an empty answer would score 1.0 against it).

>>> prompt = "Answer inside <answer> and </answer>. For example, <answer> Beijing </answer>. Question: q?\\n"
>>> search_r1_score(prompt + "<think>x</think><answer> the Eiffel Tower </answer>", ["Eiffel Tower"])
1.0
>>> search_r1_score(prompt + "<think>no idea</think>", ["Beijing"])   # the prompt's own example is read
1.0
>>> search_r1_score("<answer>Paris</answer>", ["Paris"])              # one match alone: no answer
0.0
>>> search_r1_score(prompt + "<answer>Lyon</answer>", ["Paris"], format_score=0.1)
0.1
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._gold import gold_answers, read_target, surviving
from ..._metrics import normalize_answer
from ..._plumbing import AsDict
from ...errors import ConfigError, RewardInputError
from ...grammar import search_r1_answer_matches
from ...rewards import check_columns, column_items, completion_texts

__all__ = ["SearchR1Breakdown", "SearchR1Reward", "extract_solution", "search_r1_breakdown", "search_r1_score",
           "search_r1_sequence", "search_r1_target"]


def extract_solution(sequence: str) -> str | None:
    """Search-R1's ``extract_solution``: the last ``<answer>...</answer>`` match of ``sequence``, stripped, when
    there are at least two; None with fewer.

    >>> extract_solution("<answer>a</answer> <think><answer> b </answer></think>"), extract_solution("<answer>a</answer>")
    ('b', None)
    """
    matches = search_r1_answer_matches(sequence)
    if len(matches) <= 1:
        return None
    return matches[-1].group(1).strip()


def em_check(prediction: str, golden_answers: str | Sequence[str]) -> bool:
    """Search-R1's ``em_check``: the normalised prediction equals a normalised gold answer (a string is one)."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    normalized = normalize_answer(prediction)
    return any(normalize_answer(g) == normalized for g in golden_answers)


def search_r1_score(sequence: str, target: str | Sequence[str], *, format_score: float = 0.0,
                    score: float = 1.0) -> float:
    """Search-R1's ``compute_score_em(sequence, {"target": target}, format_score=..., score=...)``, as a float."""
    answer = extract_solution(sequence)
    if answer is None:
        return 0.0
    return float(score) if em_check(answer, target) else float(format_score)


def search_r1_target(reward_model: Any = None, answers: Any = None, golden_answers: Any = None, *,
                     where: str = "") -> str | list[str]:
    """The gold answers ``search-r1`` compares with: ``reward_model.ground_truth.target`` as Search-R1 wrote it (a
    list of strings, or one string, as ``em_check`` reads them), else the toolkit's gold reader
    (:func:`~rag_curriculum._gold.gold_answers`). A ``target`` that is empty, holds only empty strings (or answers the
    normalisation empties: ``["the"]``) or is not text raises :class:`~rag_curriculum._gold.NoGoldAnswerError`
    naming ``where`` and the field (:func:`~rag_curriculum._gold.read_target`). The one departure from Search-R1:
    an entry the normalisation empties (``""``, ``"the"``) is left out, as an empty answer (``<answer> a </answer>``)
    would match it and score 1.0 (:func:`~rag_curriculum._gold.surviving`).

    >>> search_r1_target({"ground_truth": {"target": ["Paris", "", "the"]}}), search_r1_target(answers=["Lyon"])
    (['Paris'], ['Lyon'])
    """
    gt = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    if isinstance(gt, Mapping) and gt.get("target") is not None:
        return surviving(read_target(gt["target"], where=where, normalize=normalize_answer), normalize_answer)
    return gold_answers(answers, reward_model, golden_answers, where=where)


def _messages_text(prompt: Any) -> str:
    """A prompt's text without a tokenizer: a string as it is, a list of chat messages as their contents."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping):
        return str(prompt.get("content") or "")
    return "".join(str(m.get("content") or "") if isinstance(m, Mapping) else str(m) for m in (column_items(prompt) or []))


@functools.lru_cache(maxsize=4)
def _tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _prompt_ids(tokenizer: Any, prompt: Any) -> list[int]:
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    messages = [dict(m) for m in (column_items(prompt) or [])]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping) or hasattr(ids, "keys"):  # transformers 5 may hand back a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def search_r1_sequence(prompt: Any, completion: str, *, tokenizer: Any = None,
                       completion_ids: Sequence[int] | None = None) -> tuple[str, int]:
    """The string Search-R1's reward manager scores, and where the response starts in it.

    With a ``tokenizer`` (a tokenizer object, or a name or path ``AutoTokenizer`` loads): the prompt rendered as the
    trainer renders it (the chat template with the generation prompt, for chat messages), and
    ``tokenizer.decode(prompt_ids + completion_ids)`` with the special tokens kept, exactly as the manager decodes
    (``completion_ids`` default to the completion's own tokens). Without one: the prompt's message contents, then
    the completion. The two read alike unless an ``<answer>`` block would span or hold a special token or the chat
    template's text (``curriculum train`` hands the model's tokenizer to the reward, so training is exact).

    >>> search_r1_sequence([{"role": "user", "content": "Q?"}], "<answer>A</answer>")
    ('Q?<answer>A</answer>', 2)
    """
    if tokenizer is None:
        head = _messages_text(prompt)
        return head + completion, len(head)
    tok = _tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    pids = _prompt_ids(tok, prompt)
    cids = (list(completion_ids) if completion_ids is not None
            else list(tok(completion, add_special_tokens=False)["input_ids"]))
    head = tok.decode(pids)
    sequence = tok.decode(pids + [int(i) for i in cids])
    return sequence, len(head) if sequence.startswith(head) else 0


@dataclass(frozen=True, slots=True)
class SearchR1Breakdown(AsDict):
    """One trajectory's ``search-r1`` score: the score, the answer Search-R1 extracted (None: fewer than two
    matches), whether it matched a gold answer, and whether it came from the prompt (the response wrote none)."""

    score: float
    answer: str | None
    exact_match: float
    from_prompt: bool


def search_r1_breakdown(sequence: str, target: str | Sequence[str], *, response_start: int = 0,
                        format_score: float = 0.0, score: float = 1.0) -> SearchR1Breakdown:
    """:func:`search_r1_score` with what it read (see :class:`SearchR1Breakdown`)."""
    matches = search_r1_answer_matches(sequence)
    answer = matches[-1].group(1).strip() if len(matches) > 1 else None
    hit = answer is not None and em_check(answer, target)
    value = 0.0 if answer is None else float(score) if hit else float(format_score)
    return SearchR1Breakdown(value, answer, float(hit), answer is not None and matches[-1].start() < response_start)


def _check_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")):
        raise ConfigError(f"search-r1: {name}={value!r}; a finite number", hint="Search-R1's defaults: "
                          "format_score 0.0, score 1.0")
    return float(value)


@dataclass(frozen=True)
class SearchR1Reward:
    """Search-R1's ``compute_score_em`` as a batched TRL reward function (``search-r1``; see the module docstring).

    ``format_score`` and ``score`` are ``compute_score_em``'s. ``tokenizer`` (a name or path) renders the prompt and
    decodes ``completion_ids`` as Search-R1's reward manager does; ``curriculum train`` sets it to the model's. Logs
    ``search_r1/score``, ``search_r1/exact_match``, ``search_r1/extracted`` (an answer was read) and
    ``search_r1/from_prompt`` (it was the prompt's own example: the completion wrote no answer)."""

    format_score: float = 0.0
    score: float = 1.0
    tokenizer: str | None = None
    log_components: bool = True

    __name__: ClassVar[str] = "search_r1"

    def __post_init__(self) -> None:
        _check_number("format_score", self.format_score)
        _check_number("score", self.score)
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str) or not self.tokenizer.strip()):
            raise ConfigError(f"search-r1: tokenizer={self.tokenizer!r}; a tokenizer's name or path, or null")

    def components(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, *,
                   answers: Sequence[Any] | None = None, reward_model: Sequence[Any] | None = None,
                   golden_answers: Sequence[Any] | None = None, completion_ids: Sequence[Any] | None = None,
                   id: Sequence[Any] | None = None) -> list[SearchR1Breakdown]:
        """Per-completion breakdowns of a batch (one entry per completion in every column given)."""
        cols = {"prompts": prompts, "answers": answers, "reward_model": reward_model,
                "golden_answers": golden_answers, "completion_ids": completion_ids, "id": id}
        n = check_columns(completions, cols, who="the search-r1 reward")
        if answers is None and reward_model is None and golden_answers is None:
            raise RewardInputError("the search-r1 reward needs the gold answers and got none of the columns "
                                   "reward_model (with Search-R1's ground_truth.target), answers, golden_answers",
                                   kind="missing_field", field="reward_model",
                                   hint="with TRL keep remove_unused_columns=False; with verl, keep reward_model")
        texts = completion_texts(completions)
        out = []
        for i in range(n):
            where = f"completion {i} of the batch" + (f" (row id {id[i]!r})" if id is not None else "")
            target = search_r1_target(None if reward_model is None else reward_model[i],
                                      None if answers is None else answers[i],
                                      None if golden_answers is None else golden_answers[i], where=where)
            sequence, start = search_r1_sequence(
                "" if prompts is None else prompts[i], texts[i], tokenizer=self.tokenizer,
                completion_ids=None if completion_ids is None else completion_ids[i])
            out.append(search_r1_breakdown(sequence, target, response_start=start, format_score=self.format_score,
                                           score=self.score))
        return out

    def __call__(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, *,
                 answers: Sequence[Any] | None = None, reward_model: Sequence[Any] | None = None,
                 golden_answers: Sequence[Any] | None = None, completion_ids: Sequence[Any] | None = None,
                 log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        """TRL reward function: Search-R1's score of each completion."""
        got = self.components(completions, prompts, answers=answers, reward_model=reward_model,
                              golden_answers=golden_answers, completion_ids=completion_ids, id=kwargs.get("id"))
        if self.log_components and log_metric is not None and got:
            n = len(got)
            log_metric("search_r1/score", sum(b.score for b in got) / n)
            log_metric("search_r1/exact_match", sum(b.exact_match for b in got) / n)
            log_metric("search_r1/extracted", sum(b.answer is not None for b in got) / n)
            log_metric("search_r1/from_prompt", sum(b.from_prompt for b in got) / n)
        return [b.score for b in got]
