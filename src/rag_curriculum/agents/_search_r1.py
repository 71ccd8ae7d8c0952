"""Search-R1's tag protocol, the agent's side: the prompts and the environment's reply to an invalid action. The
grammar (the tags, the parser of one model turn, the ``<information>`` block the environment appends, and the
parser of a whole trajectory) is :mod:`rag_curriculum.grammar`, which the rewards read too.

**The prompt.** Two templates, both a single user message (Search-R1 uses no system prompt):

- ``search-r1`` (default): the text of VERITAS's appendix A (Table 2), with the words its typesetting garbled restored
  as ``../shared/docs/COMPANIONS.md`` reconstructs them ("inside <think> and </think> first", "by <search> query
  </search>", "between <information> and </information>. You can search as many times as you want"); its example
  answer is ``xxx``.
- ``search-r1-original``: Search-R1's released ``make_prefix`` byte for byte ("as many times as your want", example
  ``<answer> Beijing </answer>``, a trailing newline): what Search-R1's checkpoints were trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..grammar import parse_turn
from ..prompts import QuestionTemplate
from ..registry import Registry

SEARCH_R1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search>, and it will return the top searched results between <information> and "
    "</information>. You can search as many times as you want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer> without detailed illustrations. For "
    "example, <answer> xxx </answer>.\n\nQuestion: {question}"
)

SEARCH_R1_ORIGINAL_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: What the environment says after a turn with no valid action (Search-R1's text, verbatim).
INVALID_ACTION = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)



@dataclass(frozen=True)
class SearchTemplate:
    """A search agent's prompt: one user message made from the question."""

    name: str
    text: str

    def render(self, question: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text.format(question=question.strip())}]


#: The same prompts as build templates (``curriculum build --template search-r1 | search-r1-original``): the rows'
#: ``prompt`` column holds exactly what the agent's rollout starts from.
SEARCH_R1_BUILD_TEMPLATE = QuestionTemplate(name="search-r1", question_format=SEARCH_R1_PROMPT)
SEARCH_R1_ORIGINAL_BUILD_TEMPLATE = QuestionTemplate(name="search-r1-original",
                                                     question_format=SEARCH_R1_ORIGINAL_PROMPT)

AGENT_TEMPLATES: Registry[SearchTemplate] = Registry("search-agent template", check=SearchTemplate)
AGENT_TEMPLATES.register("search-r1", SearchTemplate("search-r1", SEARCH_R1_PROMPT))
AGENT_TEMPLATES.register("search-r1-original", SearchTemplate("search-r1-original", SEARCH_R1_ORIGINAL_PROMPT))

#: The prompt of a tool-calling search agent (TRL's native tool calling, :class:`rag_curriculum.train.SearchEnvironment`;
#: [T]: the toolkit's words; the tool itself is described by the chat template from the environment's ``search``
#: docstring).
SEARCH_TOOLS_PROMPT = (
    "Answer the given question. Think step by step. If you lack some knowledge, call the search tool with a query; "
    "it returns the top passages for it. You can search as many times as you want. When no further knowledge is "
    "needed, give the final answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>.\n\nQuestion: {question}"
)
AGENT_TEMPLATES.register("search-tools", SearchTemplate("search-tools", SEARCH_TOOLS_PROMPT))


def get_agent_template(name: str) -> SearchTemplate:
    """The search agent's prompt template registered under ``name``.

    Args:
        name: ``search-r1`` (Search-R1's prompt), ``search-r1-original``, or another of ``AGENT_TEMPLATES``.

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


def first_search_query(first_turn: str, question: str) -> str:
    """The query of ``agent.first_turn``'s ``<search>`` block, ``{question}`` filled in (a ConfigError when the turn
    holds no well-formed search: under ``protocol=tools`` it is a search, not a turn the model writes)."""
    turn = parse_turn(first_turn.format(question=question))
    if turn.action != "search" or not turn.content:
        raise ConfigError(f"agent.first_turn={first_turn!r} holds no <search> query: with agent.protocol=tools it "
                          "is the search the environment runs when a rollout starts",
                          hint='e.g. agent.first_turn="<search> {question} </search>", or null')
    return turn.content
