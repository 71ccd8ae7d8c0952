"""Output-format templates and passage labelling.

A template turns a question and its presented passages into chat messages. The RAG-RL template reproduces the
system prompt (Figure 4) and the user instructions (Figure 5) of appendix D verbatim (the paper's text has two
artefacts of its typesetting that are not part of the prompt: trailing double spaces that mark line breaks, and
"pas-sages" hyphenated across a line); the paper does not show how passages are laid out, so the layout
(``Title: {label}`` then the text, blank lines between, then ``Question: ...``) is this toolkit's choice and a
field of the template. Passages are cited by
title, so each passage gets a *label*: its title, made unique within the row when titles repeat
(``"Euro"``, ``"Euro (2)"``). Labels are what the model is asked to cite and what citation rewards score.

Other output formats (the companion papers' tags) are added by registering a template under a new name; the
builder looks templates up by name only. The matching completion parser lives in
:mod:`rag_curriculum.rewards` under the same name. CRAFT's five trace formats (``craft-v1`` ... ``craft-v5``,
:mod:`rag_curriculum.methods.craft`) cite documents by *number*: a template with ``citation="index"``
labels its passages ``"1"``, ``"2"``, ... (from ``index_base``), so gold labels are the gold documents' numbers.

>>> unique_labels(["Euro", "Ohio", "Euro", "Euro"])
['Euro', 'Ohio', 'Euro (2)', 'Euro (3)']
>>> msgs = get_template("rag-rl").render("Who?", [Passage("Euro", "Euro", "The euro ...", True)])
>>> [m["role"] for m in msgs]
['system', 'user']
>>> print(msgs[0]["content"])
Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
Final answer: final answer
Supporting passages: title1, title2,...
</answer>
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from .errors import ConfigError
from .registry import Registry

RAG_RL_SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n"
    "...\n"
    "</reasoning>\n"
    "<answer>\n"
    "Final answer: final answer\n"
    "Supporting passages: title1, title2,...\n"
    "</answer>"
)

RAG_RL_USER_INSTRUCTIONS = (
    "Answer the question using only the provided passages. Verify your answer directly against the text, "
    "and cite only the passages you used in your final answer."
)

#: The final answer that means "the passages do not answer the question" (unanswerable rows, ``curriculum build
#: --unanswerable-fraction``): the paper's future-work wording (section 6, "an 'unanswerable' response"). A build
#: option and a reward option (``abstention_answer``); the two must agree (the build's manifest records it).
ABSTENTION_ANSWER = "unanswerable"

#: What a build with unanswerable rows appends to the user instructions of every row (answerable ones too, so the
#: prompt never tells which rows are unanswerable); ``{answer}`` is the abstention answer. Builds without
#: unanswerable rows keep the paper's prompt byte for byte.
ABSTAIN_INSTRUCTION = (
    "If the passages do not contain the information needed to answer the question, give \"{answer}\" as the final "
    "answer and leave the supporting passages empty."
)


class Passage(NamedTuple):
    """A passage as presented in a row: its citation label, title, text and whether it is gold."""

    label: str
    title: str
    text: str
    is_gold: bool

    def to_dict(self) -> dict:
        return {"label": self.label, "title": self.title, "text": self.text, "is_gold": self.is_gold}


def unique_labels(titles: Sequence[str]) -> list[str]:
    """Citation labels unique within a row: the title, then ``"title (2)"``, ``"title (3)"`` for repeats.

    A suffixed label never collides with a real title in the same row (the counter skips taken labels).
    """
    taken = set(titles)
    if len(taken) == len(titles):
        return list(titles)
    seen: dict[str, int] = {}
    labels: list[str] = []
    used: set[str] = set()
    for t in titles:
        n = seen.get(t, 0) + 1
        seen[t] = n
        if n == 1 and t not in used:
            label = t
        else:
            k = max(n, 2)
            label = f"{t} ({k})"
            while label in used or label in taken:
                k += 1
                label = f"{t} ({k})"
        used.add(label)
        labels.append(label)
    return labels


@dataclass(frozen=True)
class PromptTemplate:
    """System prompt + user instructions + passage layout, rendered to conversational messages."""

    name: str
    system_prompt: str
    instructions: str
    passage_format: str = "Title: {label}\n{text}"
    passage_separator: str = "\n\n"
    question_format: str = "Question: {question}"
    citation: str = "label"  # what the model cites: "label" (the unique title) or "index" (the passage's number)
    index_base: int = 1  # the first passage's number when citation == "index" (CRAFT: 1, the paper's d_1..d_K)
    abstain_instruction: str = ABSTAIN_INSTRUCTION  # appended to the instructions when a build may abstain
    shows_passages: bool = True  # False: a search agent's prompt (QuestionTemplate), made from the question alone
    #: For a base model (no chat template, :func:`completion_prompt`): the opening of the response, written at the
    #: end of the prompt and part of every completion returned, and the strings that end the response.
    response_prefix: str = ""
    response_stop: tuple[str, ...] = ()

    def with_abstention(self, answer: str) -> PromptTemplate:
        """This template with :attr:`abstain_instruction` (``{answer}`` filled in) after its instructions: the
        prompt of every row of a build that has unanswerable rows."""
        extra = self.abstain_instruction.format(answer=answer)
        return replace(self, instructions=f"{self.instructions} {extra}" if self.instructions else extra)

    @property
    def numbered(self) -> bool:
        """Whether passages are cited by number (``citation == "index"``)."""
        return self.citation == "index"

    def labels(self, titles: Sequence[str]) -> list[str]:
        """The citation labels of passages with these titles, in the order shown: the unique titles
        (:func:`unique_labels`), or for a numbered template their numbers as strings from ``index_base``.

        >>> get_template("craft-v1").labels(["Euro", "Ohio", "Euro"]), get_template("rag-rl").labels(["Euro", "Euro"])
        (['1', '2', '3'], ['Euro', 'Euro (2)'])
        """
        if self.citation == "index":
            return [str(i) for i in range(self.index_base, self.index_base + len(titles))]
        return unique_labels(titles)

    def with_index_base(self, base: int) -> PromptTemplate:
        """This numbered template with passages numbered from ``base`` (0 or 1)."""
        if base not in (0, 1):
            raise ConfigError(f"index_base must be 0 or 1, got {base!r}")
        if not self.numbered:
            raise ConfigError(f"the template {self.name!r} cites passages by title, not by number: index_base does "
                              "not apply to it", hint="leave index_base unset, or use a numbered template "
                              "(craft-v1 ... craft-v5)")
        return self if base == self.index_base else replace(self, index_base=base)

    def render_user(self, question: str, passages: Sequence[Passage]) -> str:
        return self.render_fields(question, [p.label for p in passages], [p.title for p in passages],
                                  [p.text for p in passages])[-1]["content"]

    def render(self, question: str, passages: Sequence[Passage]) -> list[dict[str, str]]:
        """System and user messages for ``question`` with ``passages`` in the order given."""
        return self.render_fields(question, [p.label for p in passages], [p.title for p in passages],
                                  [p.text for p in passages])

    def render_fields(self, question: str, labels: Sequence[str], titles: Sequence[str],
                      texts: Sequence[str]) -> list[dict[str, str]]:
        """:meth:`render` from parallel lists (the builder's fast path: no objects per passage)."""
        if self.passage_format == "Title: {label}\n{text}":  # the default layout, without str.format per passage
            body = self.passage_separator.join(
                ["Title: " + lb + "\n" + x for lb, x in zip(labels, texts, strict=True)])
        else:
            fmt = self.passage_format.format
            body = self.passage_separator.join(
                [fmt(label=lb, title=t, text=x, index=i)
                 for i, (lb, t, x) in enumerate(zip(labels, titles, texts, strict=True), 1)])
        user = f"{self.instructions}\n\n{body}\n\n{self.question_format.format(question=question)}"
        if self.system_prompt:
            return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        return [{"role": "user", "content": user}]


@dataclass(frozen=True)
class QuestionTemplate(PromptTemplate):
    """A search agent's prompt as a build template: one user message, ``question_format`` filled with the question
    (stripped); no system prompt and no passages (the agent searches for them). What ``curriculum build
    --template search-r1 | search-r1-original`` writes in the ``prompt`` column, the same text the agent's rollout
    starts from (``rag_curriculum.agents``)."""

    system_prompt: str = ""
    instructions: str = ""
    shows_passages: bool = False

    def render_fields(self, question: str, labels: Sequence[str], titles: Sequence[str],
                      texts: Sequence[str]) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.question_format.format(question=question.strip())}]


#: The RAG-RL response's opening a base model is given (:func:`completion_prompt`): the reasoning left empty and the
#: answer block opened at ``Final answer:``, so that the model's first words are its answer. Why: a pretrained
#: model without instruction tuning does not follow the system prompt's format (Gemma 3 270M, asked to start at
#: ``<reasoning>``, wrote ``<answer>`` over and over on 6 of 6 HotpotQA questions, never an answer), so a
#: partition by its pass@k would find nothing answerable for a reason that has nothing to do with the passages.
RAG_RL_RESPONSE_PREFIX = "<reasoning>\n</reasoning>\n<answer>\nFinal answer:"

TEMPLATES: Registry[PromptTemplate] = Registry("template", check=PromptTemplate)
TEMPLATES.register(
    "rag-rl",
    PromptTemplate(name="rag-rl", system_prompt=RAG_RL_SYSTEM_PROMPT, instructions=RAG_RL_USER_INSTRUCTIONS,
                   response_prefix=RAG_RL_RESPONSE_PREFIX, response_stop=("</answer>",)),
)


#: What separates the messages' texts (and the prompt from the response prefix) in a completion-style prompt.
COMPLETION_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class CompletionPrompt:
    """A chat prompt rendered for a base model (:func:`completion_prompt`): ``text`` is what the model continues
    (ending with ``prefix``); ``prefix`` opens the response and is part of every completion returned; ``stop``
    ends the response; ``template`` the template recognised by its system prompt (None: the generic layout)."""

    text: str
    prefix: str = ""
    stop: tuple[str, ...] = ()
    template: str | None = None

    def describe(self) -> dict[str, object]:
        """What a manifest records of the rendering (the ``prompt_style``)."""
        return {"style": "completion", "template": self.template, "separator": COMPLETION_SEPARATOR,
                "response_prefix": self.prefix, "stop": list(self.stop)}


@functools.lru_cache(maxsize=64)
def _template_by_system(system: str) -> PromptTemplate | None:
    for name in TEMPLATES.names():
        t = TEMPLATES.get(name)
        if t.system_prompt and t.system_prompt == system:
            return t
    return None


def completion_prompt(messages: Sequence[dict[str, str]]) -> CompletionPrompt:
    """The completion-style rendering of a chat prompt, for a model without a chat template (a pretrained base
    model): the messages' texts in order, separated by a blank line, then (after another blank line) the response
    prefix of the template whose system prompt the first message is, so the model's first tokens are its answer.
    A conversation ending with an assistant message (a search agent's turn) is continued as it stands.

    The response's opening is part of the response: the backends return ``prefix + completion`` and the trainer's
    rewards score the same, so a base model's answers are parsed and rewarded exactly as a chat model's are.

    >>> p = completion_prompt(get_template("rag-rl").render("Who?", [Passage("Euro", "Euro", "The euro.", True)]))
    >>> print(p.text[p.text.index("Question:"):])
    Question: Who?
    <BLANKLINE>
    <reasoning>
    </reasoning>
    <answer>
    Final answer:
    >>> p.prefix == RAG_RL_RESPONSE_PREFIX, p.stop, p.template
    (True, ('</answer>',), 'rag-rl')
    >>> completion_prompt([{"role": "user", "content": "Question: 2+2?"}]).text.split("\\n")
    ['Question: 2+2?', '', '']
    """
    messages = list(messages)
    if messages and messages[-1].get("role") == "assistant":
        return CompletionPrompt(COMPLETION_SEPARATOR.join(m["content"] for m in messages))
    template = None
    if messages and messages[0].get("role") == "system":
        template = _template_by_system(messages[0]["content"])
    prefix = template.response_prefix if template is not None else ""
    body = COMPLETION_SEPARATOR.join(m["content"] for m in messages)
    return CompletionPrompt(body + COMPLETION_SEPARATOR + prefix, prefix,
                            template.response_stop if template is not None else (),
                            template.name if template is not None else None)


def completion_style() -> dict[str, object]:
    """What a manifest records of a base model's prompts (``prompt_style``): the completion-style rendering's rule,
    and each registered template's response prefix and stop strings (the templates that have one).

    >>> completion_style()["response_prefixes"]["rag-rl"] == RAG_RL_RESPONSE_PREFIX
    True
    """
    prefixes: dict[str, str] = {}
    stops: dict[str, list[str]] = {}
    for name in TEMPLATES.names():
        t = TEMPLATES.get(name)
        if t.response_prefix or t.response_stop:
            prefixes[name], stops[name] = t.response_prefix, list(t.response_stop)
    return {"style": "completion", "separator": COMPLETION_SEPARATOR, "response_prefixes": prefixes, "stop": stops}


@dataclass(frozen=True)
class SearchTemplate:
    """A search agent's prompt: one user message made from the question."""

    name: str
    text: str

    def render(self, question: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text.format(question=question.strip())}]


#: The search agents' prompt templates (the rollout loop's ``template``), by name; the companion methods register
#: theirs (:mod:`rag_curriculum.methods`).
AGENT_TEMPLATES: Registry[SearchTemplate] = Registry("search-agent template", check=SearchTemplate)
AGENT_TEMPLATES.register("search-tools", "rag_curriculum.agents._protocol:SEARCH_TOOLS_TEMPLATE")


def get_agent_template(name: str) -> SearchTemplate:
    """The search agent's prompt template registered under ``name``.

    Args:
        name: ``search-r1`` (Search-R1's prompt), ``search-r1-original``, ``search-tools``, ``react``, ``globalrag``, or
            another of ``AGENT_TEMPLATES``.

    Returns:
        The template (``render(question)`` gives the prompt messages).

    Raises:
        UnknownNameError: no template of that name (with a "did you mean").

    Examples:
        >>> from rag_curriculum.agents import get_agent_template
        >>> [m["role"] for m in get_agent_template("search-r1").render("Who wrote the Iliad?")]
        ['user']
    """
    return AGENT_TEMPLATES.get(name)


def get_template(name: str) -> PromptTemplate:
    """The prompt template registered under ``name``.

    Args:
        name: ``rag-rl``, ``craft-v1`` ... ``craft-v5``, ``search-r1``, ``search-r1-original``, or one registered.

    Returns:
        The template (``render(question, passages)`` gives the chat messages).

    Raises:
        UnknownNameError: no template of that name (with a "did you mean").

    Examples:
        >>> from rag_curriculum.prompts import Passage, get_template
        >>> messages = get_template("rag-rl").render("Who founded Rome?", [Passage("Rome", "Rome", "By Romulus.", True)])
        >>> print(messages[1]["content"].split("\\n\\n", 1)[1])
        Title: Rome
        By Romulus.
        <BLANKLINE>
        Question: Who founded Rome?
    """
    return TEMPLATES.get(name)


def register_template(template: PromptTemplate, *, overwrite: bool = False) -> None:
    """Register ``template`` under ``template.name``; a build then takes ``--template NAME``.

    Register an output format of the same name too (:func:`rag_curriculum.rewards.register_format`): the
    partition, the evaluation and the reward parse each row's completions with it.

    Args:
        template: the template.
        overwrite: replace a template already registered under that name.

    Raises:
        ConfigError: the name is taken (without ``overwrite``), or ``template`` is not a :class:`PromptTemplate`.

    Examples:
        ```python
        from rag_curriculum.prompts import PromptTemplate, register_template

        register_template(PromptTemplate(name="my-tags", system_prompt="...", instructions="..."))
        ```
    """
    TEMPLATES.register(template.name, template, overwrite=overwrite)
