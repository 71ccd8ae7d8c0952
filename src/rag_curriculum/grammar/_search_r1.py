"""Search-R1's tag grammar: the tags, the parser of one model turn, the ``<information>`` block the environment
appends, and the parser of a whole trajectory. The agents (:mod:`rag_curriculum.agents`: prompts, the rollout loop)
and the rewards (:mod:`rag_curriculum.rewards`) both read trajectories through it.

The model reasons in ``<think>``, asks the retriever with ``<search> query </search>``, reads the results the
environment appends inside ``<information> ... </information>``, and ends with ``<answer> ... </answer>``.
Generation of a turn stops at ``</search>`` or ``</answer>`` (:data:`STOP`).

**One turn** (what the model wrote since the environment last spoke) is classified by :func:`parse_turn`, in the
order of this table (the first rule that applies wins); ``action`` is ``search``, ``answer`` or None:

=====================  ====================================================================================
``forged_information``  the model wrote an ``<information>`` tag itself (retrieval results it invented)
``malformed_tag``       a tag of the protocol that is not well formed (``<search``, ``(search>``, ``</ search>``,
                        ``<search>q</answer>``, a closing tag without its opening tag)
``unclosed_search``     ``<search>`` opened and never closed: the query is *not* executed, never taken as an answer
``unclosed_answer``     ``<answer>`` opened and never closed
``empty_query``         ``<search></search>`` with only whitespace inside
``empty_answer``        ``<answer></answer>`` with only whitespace inside
``no_action``           neither a search nor an answer (the turn ended without either)
=====================  ====================================================================================

A turn with a well-formed ``<search>q</search>`` or ``<answer>a</answer>`` takes the *first* of them, as Search-R1
does (``re.search(r"<(search|answer)>(.*?)</\\1>")``); text after its closing tag is cut (generation stops
there). With an error the environment answers as Search-R1 does, with
:data:`rag_curriculum.agents.INVALID_ACTION` (or, with
``on_invalid="stop"``, ends the trajectory); either way the error is recorded by type.

>>> parse_turn("<think>who?</think>\\n<search> capital of France </search>")
Turn(action='search', content='capital of France', error=None)
>>> parse_turn("<think>ok</think><answer> Paris </answer> trailing").content
'Paris'
>>> parse_turn("<search> capital of France").error
'unclosed_search'
>>> parse_turn("<search>capital</answer>").error
'malformed_tag'
>>> print(information_block([("France", "Paris is the capital."), ("Paris", "A city.")]).strip())
<information>Doc 1(Title: France) Paris is the capital.
Doc 2(Title: Paris) A city.</information>
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["STOP", "TURN_ERRORS", "ParsedTrajectory", "Segment", "Turn", "information_block", "parse_trajectory",
           "parse_turn", "search_r1_answer_matches"]

#: Where one turn's generation stops.
STOP = ("</search>", "</answer>")

#: The format errors of one turn, in the order they are checked.
TURN_ERRORS = ("forged_information", "malformed_tag", "unclosed_search", "unclosed_answer", "empty_query",
               "empty_answer", "no_action")


class Turn(NamedTuple):
    """One model turn, classified: ``action`` (``search`` | ``answer`` | None), its content (the query or the
    answer, stripped), and the format error (one of :data:`TURN_ERRORS`) or None."""

    action: str | None
    content: str
    error: str | None


_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_WELL_FORMED = re.compile(r"</?(?:search|answer|think|information)>")
# anything that looks like an attempt at a protocol tag: "<search", "</search", "(search>", "< search >", "search>"
_TAG_LIKE = re.compile(r"<\s*/?\s*(?:search|answer|information)\b"  # left over once the well-formed tags are gone
                       r"|[(\[]\s*/?\s*(?:search|answer|information)\s*>"  # (search>
                       r"|(?<![\w</(\[])(?:search|answer|information)>")  # search> with no opener


def _malformed(text: str) -> bool:
    """A protocol tag that is not well formed, or closing tags that do not match the opening ones."""
    stripped = _WELL_FORMED.sub(" ", text)
    if _TAG_LIKE.search(stripped):
        return True
    stack: list[str] = []
    for m in re.finditer(r"<(/?)(search|answer)>", text):
        closing, name = m.group(1) == "/", m.group(2)
        if not closing:
            if stack:  # a tag opened inside another (<search><answer>...)
                return True
            stack.append(name)
        elif not stack or stack.pop() != name:
            return True
    return False


def parse_turn(text: str) -> Turn:
    """Classify one model turn (see the module docstring)."""
    if "<information>" in text or "</information>" in text:
        return Turn(None, "", "forged_information")
    m = _ACTION.search(text)
    head = text if m is None else text[:m.end()]
    if _malformed(head):
        return Turn(None, "", "malformed_tag")
    if m is None:
        if "<search>" in text:
            return Turn(None, "", "unclosed_search")
        if "<answer>" in text:
            return Turn(None, "", "unclosed_answer")
        return Turn(None, "", "no_action")
    action, content = m.group(1), m.group(2).strip()
    if not content:
        return Turn(None, "", "empty_query" if action == "search" else "empty_answer")
    return Turn(action, content, None)


def information_block(passages: Sequence[tuple[str, str]]) -> str:
    """What the environment appends after a search: Search-R1's layout, ``\\n\\n<information>Doc 1(Title: t) text
    \\nDoc 2(...) ...</information>\\n\\n`` (each passage ``Doc {i}(Title: {title}) {text}``, 1-based)."""
    body = "".join(f"Doc {i}(Title: {title}) {text}\n" for i, (title, text) in enumerate(passages, 1))
    return f"\n\n<information>{body.strip()}</information>\n\n"


class Segment(NamedTuple):
    """A piece of a trajectory's text: written by the ``model`` or appended by the ``env``."""

    source: str
    text: str


@dataclass
class ParsedTrajectory:
    """A trajectory split into its blocks: ``think`` blocks, ``searches`` (queries), ``informations`` (the
    environment's blocks, their inner text), and the final ``answer`` (None without one), in order as ``blocks``:
    ``(tag, content)`` pairs."""

    blocks: list[tuple[str, str]] = field(default_factory=list)
    answer: str | None = None

    def of(self, tag: str) -> list[str]:
        return [c for t, c in self.blocks if t == tag]


_BLOCK = re.compile(r"<(think|search|information|answer)>(.*?)</\1>", re.DOTALL)


def parse_trajectory(text: str) -> ParsedTrajectory:
    """The blocks of a trajectory, in order; the answer is the last ``<answer>`` block's content.

    >>> p = parse_trajectory("<think>a</think><search>q</search>\\n\\n<information>Doc 1(Title: t) x</information>"
    ...                      "\\n\\n<think>b</think><answer> y </answer>")
    >>> [t for t, _ in p.blocks], p.answer
    (['think', 'search', 'information', 'think', 'answer'], 'y')
    """
    out = ParsedTrajectory()
    for m in _BLOCK.finditer(text):
        out.blocks.append((m.group(1), m.group(2).strip()))
    answers = out.of("answer")
    out.answer = answers[-1] if answers else None
    return out


_ANSWER_MATCH = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def search_r1_answer_matches(text: str) -> list[re.Match[str]]:
    """Every ``<answer>(.*?)</answer>`` match of ``text`` (``re.DOTALL``), in order, wherever it stands (inside
    ``<think>`` or ``<information>`` too): what Search-R1's own reward (``qa_em.extract_solution``) reads, on the
    prompt and the response together.

    >>> [m.group(1) for m in search_r1_answer_matches("<answer>a</answer><think><answer>b</answer></think>")]
    ['a', 'b']
    """
    return list(_ANSWER_MATCH.finditer(text))
