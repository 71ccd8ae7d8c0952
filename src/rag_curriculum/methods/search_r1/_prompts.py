"""Search-R1's prompts (PeterGriffinJin/Search-R1) as agent templates (the rollout's first message) and as build
templates (``curriculum build --template search-r1 | search-r1-original``: the rows' ``prompt`` column holds exactly
what the agent's rollout starts from), and the output format that reads a search agent's answer as Search-R1 does.

**The prompt.** Two templates, both a single user message (Search-R1 uses no system prompt):

- ``search-r1`` (default): the text of VERITAS's appendix A (Table 2), with the words its typesetting garbled restored
  as ``../shared/docs/COMPANIONS.md`` reconstructs them ("inside <think> and </think> first", "by <search> query
  </search>", "between <information> and </information>. You can search as many times as you want"); its example
  answer is ``xxx``.
- ``search-r1-original``: Search-R1's released ``make_prefix`` byte for byte ("as many times as your want", example
  ``<answer> Beijing </answer>``, a trailing newline): what Search-R1's checkpoints were trained on.
"""

from __future__ import annotations

from typing import Any

from ...grammar import parse_trajectory
from ...prompts import QuestionTemplate, SearchTemplate
from ...rewards import MISSING_TAG, OutputFormat, ParsedCompletion

__all__ = ["SEARCH_R1_ORIGINAL_PROMPT", "SEARCH_R1_PROMPT", "parse_search_answer"]

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

#: The agent templates (registered by name).
SEARCH_R1_TEMPLATE = SearchTemplate("search-r1", SEARCH_R1_PROMPT)
SEARCH_R1_ORIGINAL_TEMPLATE = SearchTemplate("search-r1-original", SEARCH_R1_ORIGINAL_PROMPT)

#: The same prompts as build templates: the rows' ``prompt`` column holds exactly what the agent's rollout starts
#: from.
SEARCH_R1_BUILD_TEMPLATE = QuestionTemplate(name="search-r1", question_format=SEARCH_R1_PROMPT)
SEARCH_R1_ORIGINAL_BUILD_TEMPLATE = QuestionTemplate(name="search-r1-original",
                                                     question_format=SEARCH_R1_ORIGINAL_PROMPT)


def parse_search_answer(text: str, labels: Any = None, *, max_chars: int | None = None) -> ParsedCompletion:
    """A search agent's completion read as Search-R1 reads it: the answer is the last ``<answer>`` block (no
    citations; valid when there is one)."""
    answer = parse_trajectory(text or "").answer
    if answer is None:
        return ParsedCompletion("", (), False, MISSING_TAG, "no <answer> ... </answer> block")
    return ParsedCompletion(answer, (), True)


#: The output formats of a build of Search-R1's questions: the answer of the last ``<answer>`` block.
SEARCH_R1_FORMAT = OutputFormat("search-r1", parse_search_answer)
SEARCH_R1_ORIGINAL_FORMAT = OutputFormat("search-r1-original", parse_search_answer)
