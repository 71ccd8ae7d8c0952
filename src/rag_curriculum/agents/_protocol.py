"""The search environment's side of the tag protocol the rollout loop speaks (Search-R1's ``<search>`` /
``<information>`` / ``<answer>``): the environment's reply to an invalid action, the tool-calling agent's prompt
(``search-tools``) and the first search a rollout may start from. The grammar (the tags, the parser of one model
turn, the ``<information>`` block the environment appends, and the parser of a whole trajectory) is
:mod:`rag_curriculum.grammar`; the agents' prompt templates are registered in
:data:`rag_curriculum.prompts.AGENT_TEMPLATES` (Search-R1's own prompts: :mod:`rag_curriculum.methods.search_r1`).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..grammar import parse_turn
from ..prompts import SearchTemplate

#: What the environment says after a turn with no valid action (Search-R1's text, verbatim).
INVALID_ACTION = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)


#: The prompt of a tool-calling search agent (TRL's native tool calling, :class:`rag_curriculum.train.SearchEnvironment`;
#: [T]: the toolkit's words; the tool itself is described by the chat template from the environment's ``search``
#: docstring).
SEARCH_TOOLS_PROMPT = (
    "Answer the given question. Think step by step. If you lack some knowledge, call the search tool with a query; "
    "it returns the top passages for it. You can search as many times as you want. When no further knowledge is "
    "needed, give the final answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>.\n\nQuestion: {question}"
)
#: The ``search-tools`` agent template (registered by name in :data:`rag_curriculum.prompts.AGENT_TEMPLATES`).
SEARCH_TOOLS_TEMPLATE = SearchTemplate("search-tools", SEARCH_TOOLS_PROMPT)


def first_search_query(first_turn: str, question: str) -> str:
    """The query of ``agent.first_turn``'s ``<search>`` block, ``{question}`` filled in (a ConfigError when the turn
    holds no well-formed search: under ``protocol=tools`` it is a search, not a turn the model writes)."""
    turn = parse_turn(first_turn.format(question=question))
    if turn.action != "search" or not turn.content:
        raise ConfigError(f"agent.first_turn={first_turn!r} holds no <search> query: with agent.protocol=tools it "
                          "is the search the environment runs when a rollout starts",
                          hint='e.g. agent.first_turn="<search> {question} </search>", or null')
    return turn.content
