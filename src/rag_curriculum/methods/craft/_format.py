"""CRAFT's trace formats (``craft-v1`` ... ``craft-v5``): their prompt templates and the strict parser of their
completions, with the error taxonomy of the paper's Table 12 as ``reason`` codes.

The tag sets are those of Table 11 (and section 4.3), which the toolkit takes as authoritative where appendix C.2
contradicts them:

============  =========================================
``craft-v1``  ``<plan><gold_docs><reason><answer>``
``craft-v2``  ``<gold_docs><reason><answer>``
``craft-v3``  ``<plan><reason><answer>``
``craft-v4``  ``<reason><answer>``
``craft-v5``  ``<answer>``
============  =========================================

The paper does not print its prompts: the system prompts and instructions below are this toolkit's, written to ask
for exactly these tags. Documents are shown numbered, ``[1] Title`` then the text (the paper's formulation indexes
the candidate set D = {d_1, ..., d_K} and the gold supports S* within {1, ..., K}, so numbering starts at 1 by
default; ``index_base=0`` numbers from 0), and are cited by number.

A valid completion is, up to whitespace between the blocks, exactly the variant's blocks in order, each closed by
its own tag, nothing before the first or after the last. Rules, each with its ``reason`` (the first broken rule in
this order):

=======================  =========================================================================================
``wrong_format``         no tags at all (a bare answer, ``[Beaumont, Texas]``), a closing tag without its opening
                         tag, a tag the variant does not have, a required tag missing (other than ``<answer>``), a
                         tag twice, tags out of order, or ``<gold_docs>`` that is not a list of numbers
``tag_mismatch``         a block closed by another tag's closing tag (``<reason>...</answer>``)
``missing_closing_tag``  a block never closed (``<answer>1958 Award`` at the end), opened again before it is closed,
                         or closed by a malformed tag (``</>``)
``truncated``            the response ends inside a block before the later blocks (``<answer>``) ever start
``missing_answer``       every block is closed but there is no ``<answer>`` block
``empty_answer``         the ``<answer>`` block holds only whitespace
``extra_text``           text before the first tag, between blocks, or after the last closing tag
                         (``<answer>No</answer> (Note: ...)``)
=======================  =========================================================================================

Whatever the verdict, the parser extracts what it can: the answer (the content of the last ``<answer>`` block, up
to its closing tag, the next tag or the end; a completion with no tags at all is read as a bare answer, as the
paper's answer-only scores of non-compliant base models imply), the declared ``<gold_docs>`` numbers, and the
document numbers cited in ``<reason>`` (``[7]``, ``[11, 12, 1]``, ``document [2]``, ``Doc 4``, ``documents 2 and
5``).

>>> p = parse_craft_v1("<plan>Q1?</plan><gold_docs>[2, 7]</gold_docs><reason>From document [2] ... Document [7] "
...                    "states ...</reason><answer>Russell Humphreys</answer>")
>>> p.valid, p.answer, p.gold_docs, p.cited, p.citations
(True, 'Russell Humphreys', (2, 7), (2, 7), ('2', '7'))
>>> parse_craft_v4("<reason>...</reason><answer>No</answer> (Note: The reasoning...)").reason
'extra_text'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...prompts import PromptTemplate
from ...rewards import OutputFormat, ParsedCompletion

__all__ = [
    "CRAFT_REASONS",
    "CRAFT_VARIANTS",
    "CraftParse",
    "cited_documents",
    "craft_template",
    "craft_variant",
    "parse_craft",
]

#: Tags of each variant, in order (Table 11).
CRAFT_VARIANTS: dict[str, tuple[str, ...]] = {
    "craft-v1": ("plan", "gold_docs", "reason", "answer"),
    "craft-v2": ("gold_docs", "reason", "answer"),
    "craft-v3": ("plan", "reason", "answer"),
    "craft-v4": ("reason", "answer"),
    "craft-v5": ("answer",),
}

WRONG_FORMAT = "wrong_format"
TAG_MISMATCH = "tag_mismatch"
MISSING_CLOSING_TAG = "missing_closing_tag"
TRUNCATED = "truncated"
MISSING_ANSWER = "missing_answer"
EMPTY_ANSWER = "empty_answer"
EXTRA_TEXT = "extra_text"
#: The reason codes (Table 12's error taxonomy).
CRAFT_REASONS = (WRONG_FORMAT, TAG_MISMATCH, MISSING_CLOSING_TAG, TRUNCATED, MISSING_ANSWER, EMPTY_ANSWER,
                 EXTRA_TEXT)

# ---------------------------------------------------------------------------------------------------------------
# Templates (the toolkit's wording: the paper does not print its prompts)

_SHAPE = {
    "plan": "Subquestion 1: ...\nSubquestion 2: ...",
    "gold_docs": "[i, j, ...]",
    "reason": "...",
    "answer": "final answer",
}


def _system_prompt(tags: tuple[str, ...]) -> str:
    lines = ["Respond in the following format:"]
    for t in tags:
        lines += [f"<{t}>", _SHAPE[t], f"</{t}>"]
    return "\n".join(lines)


def _instructions(tags: tuple[str, ...]) -> str:
    has = set(tags)
    parts = ["Answer the question using only the numbered documents below; each document starts with its number in "
             "square brackets."]
    if "plan" in has:
        parts.append("In <plan>, break the question into the sub-questions that lead to the answer, in order.")
    if "gold_docs" in has:
        parts.append("In <gold_docs>, before reasoning, list the numbers of the documents that support the answer, "
                     "in square brackets, e.g. [2, 5].")
    if "reason" in has:
        steps = "answer the sub-questions of the plan step by step" if "plan" in has else "reason step by step"
        cite = "citing each document you use by its number, e.g. document [2]"
        if "gold_docs" in has:
            cite += ", and only documents listed in <gold_docs>"
        parts.append(f"In <reason>, {steps}, {cite}.")
    parts.append("In <answer>, give only the final answer, as short as possible (a name, a date, a number, yes or "
                 "no), with no explanation.")
    parts.append("Write nothing before the first tag or after </answer>.")
    return " ".join(parts)


def craft_template(name: str, *, index_base: int = 1) -> PromptTemplate:
    """The prompt template of a CRAFT variant: the toolkit's system prompt and instructions for its tags, the
    documents numbered from ``index_base`` (``[1] Title`` then the text) and cited by number."""
    tags = CRAFT_VARIANTS[name]
    abstain = ("If the documents do not contain the information needed to answer the question, give \"{answer}\" "
               "in <answer>" + (" and list no document in <gold_docs>, []." if "gold_docs" in tags else "."))
    return PromptTemplate(name=name, system_prompt=_system_prompt(tags), instructions=_instructions(tags),
                          passage_format="[{label}] {title}\n{text}", citation="index", index_base=index_base,
                          abstain_instruction=abstain)


CRAFT_V1_TEMPLATE = craft_template("craft-v1")
CRAFT_V2_TEMPLATE = craft_template("craft-v2")
CRAFT_V3_TEMPLATE = craft_template("craft-v3")
CRAFT_V4_TEMPLATE = craft_template("craft-v4")
CRAFT_V5_TEMPLATE = craft_template("craft-v5")


def craft_variant(name: str | None) -> tuple[str, ...] | None:
    """The tags of the CRAFT variant ``name`` (None when ``name`` is not a CRAFT format)."""
    return CRAFT_VARIANTS.get(name) if name else None


# ---------------------------------------------------------------------------------------------------------------
# Parser

_TAG_RE = re.compile(r"<(/?)(plan|gold_docs|reason|answer)>|</>")
_INT_RE = re.compile(r"\d+")
_GOLD_DOCS_RE = re.compile(r"\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]|\d+\s*(?:,\s*\d+\s*)*|")  # [2, 5], 2, 5, [], nothing
# "[7]", "[11, 12, 1]", "document [2]", "Doc 4", "docs 2 and 5", "documents #3, 4 or 6"
_BRACKETS_RE = re.compile(r"\[\s*(\d+(?:\s*[,;]\s*\d+)*)\s*\]")
_WORDS_RE = re.compile(r"\b(?:doc|docs|document|documents|passage|passages)\b\.?\s*(?:no\.?\s*)?#?\s*"
                       r"(\d+(?:\s*(?:,|;|&|and|or)\s*#?\s*\d+)*)\b", re.IGNORECASE)


def _ints(text: str) -> list[int]:
    return [int(x) for x in _INT_RE.findall(text)]


def _unique(values: Iterable[int]) -> tuple[int, ...]:
    seen: dict[int, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return tuple(seen)


def cited_documents(reason: str) -> tuple[int, ...]:
    """The document numbers cited in a ``<reason>`` text, in order of first citation, each once: numbers in square
    brackets (``[7]``, ``[11, 12, 1]``) and numbers after ``doc`` / ``document(s)`` / ``passage(s)``.

    >>> cited_documents("From document [2], ... Document [7] states ...; see also doc 4 and docs [11, 12, 1].")
    (2, 7, 4, 11, 12, 1)
    >>> cited_documents("[Answer1]: From document 4, we learn ... Documents 5 and 2 ...")
    (4, 5, 2)
    """
    found: list[tuple[int, int]] = []
    for m in _BRACKETS_RE.finditer(reason):
        found += [(m.start(), v) for v in _ints(m.group(1))]
    for m in _WORDS_RE.finditer(reason):
        found += [(m.start(), v) for v in _ints(m.group(1))]
    found.sort(key=lambda p: p[0])
    return _unique(v for _, v in found)


@dataclass(frozen=True, slots=True)
class CraftParse(ParsedCompletion):
    """What a CRAFT completion says and whether it keeps its variant's format: a :class:`ParsedCompletion` (answer,
    citations, validity, reason, detail, reasoning) with the CRAFT blocks after it.

    ``citations`` are the ``<gold_docs>`` numbers as strings (what the evidence F1 compares with the row's gold
    labels, the gold documents' numbers); ``gold_docs`` the same as integers, None when the variant has no
    ``<gold_docs>`` or the completion none; ``cited`` the numbers cited in ``<reason>``; ``reason`` one of
    :data:`CRAFT_REASONS` (None when valid) and ``detail`` what exactly is wrong.
    """

    plan: str = ""
    gold_docs: tuple[int, ...] | None = None
    cited: tuple[int, ...] = ()
    variant: str = ""


def _blocks(text: str, tokens: list[tuple[str, str | None, int, int]]) -> dict[str, str]:
    """The content of the first block of each tag (the last for ``answer``), up to the next tag or the end."""
    out: dict[str, str] = {}
    for k, (kind, name, _, end) in enumerate(tokens):
        if kind != "open" or name is None:
            continue
        stop = tokens[k + 1][2] if k + 1 < len(tokens) else len(text)
        if name == "answer" or name not in out:
            out[name] = text[end:stop]
    return out


def _check(text: str, tokens: list[tuple[str, str | None, int, int]], tags: tuple[str, ...],
           blocks: dict[str, str]) -> tuple[str | None, str]:
    if not tokens:
        return WRONG_FORMAT, "no tags: the response is bare text"
    want = tags
    open_name: str | None = None
    order: list[str] = []
    gaps: list[tuple[int, int]] = []  # text outside the blocks
    last_end = 0
    for kind, name, start, end in tokens:
        if kind == "bad":
            return MISSING_CLOSING_TAG, (f"<{open_name}> is closed by the malformed tag '</>'" if open_name
                                         else "malformed closing tag '</>'")
        if kind == "open":
            if open_name is not None:
                return MISSING_CLOSING_TAG, f"<{open_name}> is not closed before <{name}>"
            if name not in want:
                return WRONG_FORMAT, f"<{name}> is not a tag of this format (expected {''.join(f'<{t}>' for t in want)})"
            gaps.append((last_end, start))
            open_name = name
            order.append(name)
        else:
            if open_name is None:
                return WRONG_FORMAT, f"</{name}> without <{name}>"
            if name != open_name:
                return TAG_MISMATCH, f"<{open_name}> is closed by </{name}>"
            open_name = None
            last_end = end
    if open_name is not None:
        later = want[want.index(open_name) + 1:] if open_name in want else ()
        if open_name == "answer" and not blocks.get("answer", "").strip():
            return EMPTY_ANSWER, "<answer> holds nothing (and is never closed)"
        if later:
            return TRUNCATED, f"the response ends inside <{open_name}>; <{later[0]}> never starts"
        return MISSING_CLOSING_TAG, f"<{open_name}> is never closed"
    if "answer" not in order:
        return MISSING_ANSWER, "no <answer> block"
    for t in want:
        if order.count(t) > 1:
            return WRONG_FORMAT, f"<{t}> appears {order.count(t)} times"
    missing = [t for t in want if t not in order]
    if missing:
        return WRONG_FORMAT, f"no <{missing[0]}> block"
    if tuple(order) != want:
        return WRONG_FORMAT, f"blocks in the order {''.join(f'<{t}>' for t in order)}, expected " \
                             f"{''.join(f'<{t}>' for t in want)}"
    if "gold_docs" in want and not _GOLD_DOCS_RE.fullmatch(blocks["gold_docs"].strip()):
        return WRONG_FORMAT, "<gold_docs> must list document numbers, e.g. [2, 5]"
    if not blocks["answer"].strip():
        return EMPTY_ANSWER, "<answer></answer> holds nothing"
    gaps.append((last_end, len(text)))
    for k, (a, b) in enumerate(gaps):
        if text[a:b].strip():
            where = ("before the first tag" if k == 0 else "after the last closing tag" if k == len(gaps) - 1
                     else "between blocks")
            return EXTRA_TEXT, f"text {where}: {text[a:b].strip()[:40]!r}"
    return None, ""


def parse_craft(text: str, labels: Iterable[str] | None = None, *, variant: str = "craft-v1",
                max_chars: int | None = None) -> CraftParse:
    """Parse a completion in the CRAFT format ``variant`` (see the module docstring). ``labels`` (the row's passage
    labels) and ``max_chars`` are accepted for the parser interface and not used: citations are numbers, and
    completion length is bounded by the generation limit (256 tokens in the paper).

    >>> parse_craft("<reason>...Michael Rubbo</answer>", variant="craft-v2").reason
    'tag_mismatch'
    >>> p = parse_craft("A Bug's Life", variant="craft-v5")
    >>> p.reason, p.answer
    ('wrong_format', "A Bug's Life")
    """
    tags = CRAFT_VARIANTS[variant]
    tokens: list[tuple[str, str | None, int, int]] = []
    for m in _TAG_RE.finditer(text):
        if m.group(2) is None:
            tokens.append(("bad", None, m.start(), m.end()))
        else:
            tokens.append(("close" if m.group(1) else "open", m.group(2), m.start(), m.end()))
    blocks = _blocks(text, tokens)
    reason, detail = _check(text, tokens, tags, blocks)
    if tokens:
        answer = blocks.get("answer", "").strip()
    else:
        answer = text.strip()
    gold: tuple[int, ...] | None = None
    if "gold_docs" in tags and "gold_docs" in blocks:
        gold = _unique(_ints(blocks["gold_docs"]))
    reasoning = blocks.get("reason", "").strip()
    return CraftParse(answer=answer, citations=tuple(str(i) for i in gold) if gold else (), valid=reason is None,
                      reason=reason, detail=detail, reasoning=reasoning, plan=blocks.get("plan", "").strip(),
                      gold_docs=gold, cited=cited_documents(reasoning) if reasoning else (), variant=variant)


def _parser(variant: str) -> Any:
    def parse(text: str, labels: Iterable[str] | None = None, *, max_chars: int | None = None) -> CraftParse:
        return parse_craft(text, labels, variant=variant, max_chars=max_chars)

    parse.__name__ = parse.__qualname__ = f"parse_{variant.replace('-', '_')}"
    parse.__doc__ = f"Parse a completion in the {variant} format ({''.join(f'<{t}>' for t in CRAFT_VARIANTS[variant])})."
    return parse


parse_craft_v1 = _parser("craft-v1")
parse_craft_v2 = _parser("craft-v2")
parse_craft_v3 = _parser("craft-v3")
parse_craft_v4 = _parser("craft-v4")
parse_craft_v5 = _parser("craft-v5")

#: The output formats (a template's name paired with the parser of its completions), registered by name.
CRAFT_V1_FORMAT = OutputFormat("craft-v1", parse_craft_v1)
CRAFT_V2_FORMAT = OutputFormat("craft-v2", parse_craft_v2)
CRAFT_V3_FORMAT = OutputFormat("craft-v3", parse_craft_v3)
CRAFT_V4_FORMAT = OutputFormat("craft-v4", parse_craft_v4)
CRAFT_V5_FORMAT = OutputFormat("craft-v5", parse_craft_v5)
