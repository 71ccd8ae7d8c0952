"""The strict parser of the RAG-RL output format (appendix D, Figure 4).

A valid completion is, up to surrounding whitespace::

    <reasoning>
    ...
    </reasoning>
    <answer>
    Final answer: <one line, not empty>
    Supporting passages: <label>, <label>, ...
    </answer>

Rules, each with the ``reason`` reported when it is broken (the first broken rule, in this order):

=====================  ==============================================================================================
``missing_tag``        one of ``<reasoning>``, ``</reasoning>``, ``<answer>``, ``</answer>`` is absent
``unclosed_tag``       an opening tag is never closed (typically a completion cut at the token limit)
``duplicate_tag``      a tag appears more than once
``wrong_order``        the four tags are not in the order above
``text_outside_tags``  non-whitespace text before ``<reasoning>``, between the blocks, or after ``</answer>``
``missing_heading``    no ``Final answer:`` or no ``Supporting passages:`` heading in the answer block
``misplaced_heading``  the headings are swapped, or ``Supporting passages:`` does not start a line
``extra_text``         text before ``Final answer:``, an answer over several lines, or text after the citation line
``empty_answer``       nothing after ``Final answer:``
``non_english``        a character outside the Latin scripts, Greek, and common punctuation / symbol blocks
                       (CJK, Cyrillic, Arabic, emoji, ...) anywhere in the completion
``too_long``           more than ``max_chars`` characters (default 4000, about the paper's 800-token cap)
=====================  ==============================================================================================

Tags are matched exactly (lower case, no attributes); headings ignore case and allow spaces before the colon. The
reasoning may be empty. The citation list may be empty (a valid format that earns no citation reward).

Even when the format is invalid the parser extracts what it can (the last answer block, or the text after the last
``Final answer:``), so that metrics can still be computed; rewards decide what to do with ``valid``.

Citations are split on commas; with ``labels`` (all passage labels of the row) adjacent pieces are greedily
re-joined, longest first, when the joined text is a known label (spacing around the commas ignored), so titles
containing commas survive. A piece matching a label (up to whitespace, quotes, a trailing period, and case when
no other label of the row differs from it only by case) is returned as that label; others are returned as
written, stripped. Repeated citations are kept once.

>>> text = '''<reasoning>
... Both passages name the village.
... </reasoning>
... <answer>
... Final answer: Deh Bagh
... Supporting passages: deh bagh, ravansar, Euro (2).
... </answer>'''
>>> p = parse_completion(text, labels=["Euro", "Deh Bagh, Ravansar", "Euro (2)"])
>>> p.answer, p.citations, p.valid
('Deh Bagh', ('Deh Bagh, Ravansar', 'Euro (2)'), True)
>>> parse_completion("<reasoning>x</reasoning>\\n<answer>\\nFinal answer: 5\\n").reason
'unclosed_tag'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .._metrics import _CITATION_STRIP, citation_key

__all__ = [
    "DEFAULT_MAX_CHARS",
    "REASONS",
    "ParsedCompletion",
    "find_non_english",
    "parse_completion",
    "split_citations",
]

DEFAULT_MAX_CHARS = 4000

MISSING_TAG = "missing_tag"
UNCLOSED_TAG = "unclosed_tag"
DUPLICATE_TAG = "duplicate_tag"
WRONG_ORDER = "wrong_order"
TEXT_OUTSIDE_TAGS = "text_outside_tags"
MISSING_HEADING = "missing_heading"
MISPLACED_HEADING = "misplaced_heading"
EXTRA_TEXT = "extra_text"
EMPTY_ANSWER = "empty_answer"
NON_ENGLISH = "non_english"
TOO_LONG = "too_long"
REASONS = (
    MISSING_TAG, UNCLOSED_TAG, DUPLICATE_TAG, WRONG_ORDER, TEXT_OUTSIDE_TAGS, MISSING_HEADING,
    MISPLACED_HEADING, EXTRA_TEXT, EMPTY_ANSWER, NON_ENGLISH, TOO_LONG,
)

_R_OPEN, _R_CLOSE, _A_OPEN, _A_CLOSE = "<reasoning>", "</reasoning>", "<answer>", "</answer>"
_EXPECTED = (_R_OPEN, _R_CLOSE, _A_OPEN, _A_CLOSE)
_TAG_RE = re.compile(r"</?(?:reasoning|answer)>")
_FINAL_RE = re.compile(r"final answer[ \t]*:", re.IGNORECASE)
_SUPPORT_RE = re.compile(r"supporting passages[ \t]*:", re.IGNORECASE)

# What "English" allows: ASCII, the Latin blocks (accented names: Ålesund, Żołnierz, Hawaiʻi), combining marks,
# Greek (symbols such as alpha or Delta), and the punctuation, currency, letterlike, number-form, arrow and math blocks.
_ENGLISH_RANGES = (
    "\x00-\x7f"
    "\u00a0-\u02ff"  # Latin-1 Supplement, Latin Extended-A/B, IPA, spacing modifiers
    "\u0300-\u036f"  # combining diacritical marks
    "\u0370-\u03ff"  # Greek and Coptic
    "\u1e00-\u1eff"  # Latin Extended Additional
    "\u2000-\u22ff"  # general punctuation ... mathematical operators
    "\u2c60-\u2c7f"  # Latin Extended-C
    "\ua720-\ua7ff"  # Latin Extended-D
    "\ufb00-\ufb06"  # Latin ligatures
)
_NON_ENGLISH_RE = re.compile(f"[^{_ENGLISH_RANGES}]")


@dataclass(frozen=True, slots=True)
class ParsedCompletion:
    """What a completion says, and whether it keeps the format.

    ``answer`` and ``citations`` are extracted even when ``valid`` is False (empty when nothing can be found);
    ``reason`` is one of :data:`REASONS` (None when valid) and ``detail`` says what exactly is wrong.
    """

    answer: str
    citations: tuple[str, ...]
    valid: bool
    reason: str | None = None
    detail: str = ""
    reasoning: str = ""


def find_non_english(text: str) -> str | None:
    """The first character the format reward counts as non-English, or None.

    >>> find_non_english("Ålesund, Hawaiʻi, 3–4 °C, α-helix"), find_non_english("北京 is Beijing")
    (None, '北')
    """
    if text.isascii():
        return None
    m = _NON_ENGLISH_RE.search(text)
    return m.group() if m else None


class _LabelIndex:
    """The labels of a row, looked up by citation key, then (when unambiguous) ignoring case."""

    __slots__ = ("exact", "folded", "keys", "starts")

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.keys: dict[str, str] = {}  # label -> its citation key
        self.exact: dict[str, str] = {}
        self.folded: dict[str, str | None] = {}  # None: several labels differ only by case
        self.starts: dict[str, int] = {}  # folded key of the first piece of a comma label -> most pieces
        for label in labels:
            key = citation_key(label)
            if not key:
                continue
            self.keys[label] = key
            keys = [key]
            n = label.count(",") + 1
            if n > 1:
                pieces = label.split(",")
                keys.append(citation_key(_join_pieces(pieces)))  # "A,B" and "A , B" read as "A, B"
                first = citation_key(pieces[0]).casefold()
                self.starts[first] = max(self.starts.get(first, 1), n)
            for k in keys:
                self.exact.setdefault(k, label)
                f = k.casefold()
                if self.folded.get(f, label) != label:
                    self.folded[f] = None
                else:
                    self.folded[f] = label

    def lookup(self, key: str) -> str | None:
        label = self.exact.get(key)
        if label is None:
            label = self.folded.get(key.casefold())
        if label is None and key.endswith("."):  # a sentence-final period
            return self.lookup(citation_key(key[:-1]))
        return label


@functools.lru_cache(maxsize=4096)
def _label_index(labels: tuple[str, ...]) -> _LabelIndex:
    return _LabelIndex(labels)


def _join_pieces(pieces: list[str]) -> str:
    return ", ".join(p.strip() for p in pieces)


def split_citations(text: str, labels: Iterable[str] | None = None) -> tuple[str, ...]:
    """Split a ``Supporting passages:`` line into citations, re-joining comma-split known labels.

    >>> split_citations("Deh Bagh, Ravansar, kent", ["Deh Bagh, Ravansar", "Kent"])
    ('Deh Bagh, Ravansar', 'Kent')
    >>> split_citations("Deh Bagh, Ravansar, 'Kent'")
    ('Deh Bagh', 'Ravansar', 'Kent')
    """
    parts = text.split(",")
    index = _label_index(labels if isinstance(labels, tuple) else tuple(labels)) if labels is not None else None
    out: list[str] = []
    seen: set[str] = set()
    i, n = 0, len(parts)
    while i < n:
        key = citation_key(parts[i])
        label = None
        if index is not None:
            width = index.starts.get(key.casefold(), 1) if index.starts else 1
            for j in range(min(n, i + width), i + 1, -1):  # longest re-joined label first
                label = index.lookup(citation_key(_join_pieces(parts[i:j])))
                if label is not None:
                    i = j
                    break
            if label is None:
                label = index.lookup(key)
                if label is not None:
                    i += 1
        if label is None:
            label = parts[i].strip(_CITATION_STRIP)
            i += 1
        else:
            key = index.keys[label]  # type: ignore[union-attr]
        if key and key not in seen:
            seen.add(key)
            out.append(label)
    return tuple(out)


def _first_line(s: str) -> str:
    for line in s.split("\n"):
        line = line.strip()
        if line:
            return line
    return ""


def _structure_problem(names: list[str]) -> tuple[str, str]:
    for open_, close in ((_R_OPEN, _R_CLOSE), (_A_OPEN, _A_CLOSE)):
        n_open, n_close = names.count(open_), names.count(close)
        if n_open == 0 and n_close == 0:
            return MISSING_TAG, f"no {open_} tag"
        if n_close == 0:
            return UNCLOSED_TAG, f"{open_} is never closed"
        if n_open == 0:
            return MISSING_TAG, f"{close} without {open_}"
    for tag in _EXPECTED:
        if names.count(tag) > 1:
            return DUPLICATE_TAG, f"{tag} appears {names.count(tag)} times"
    return WRONG_ORDER, "expected <reasoning>...</reasoning> then <answer>...</answer>"


def _read_block(block: str) -> tuple[str, str, str | None, str]:
    """(answer, citation text, problem, detail) of an answer block; extracts as much as it can."""
    fa = _FINAL_RE.search(block)
    if fa is None:
        sp = _SUPPORT_RE.search(block)
        return "", _first_line(block[sp.end():]) if sp else "", MISSING_HEADING, "no 'Final answer:' heading"
    sp = _SUPPORT_RE.search(block, fa.end())
    if sp is None:
        before = _SUPPORT_RE.search(block, 0, fa.start())
        answer = _first_line(block[fa.end():])
        if before is not None:
            cites = _first_line(block[before.end():fa.start()])
            return answer, cites, MISPLACED_HEADING, "'Supporting passages:' comes before 'Final answer:'"
        return answer, "", MISSING_HEADING, "no 'Supporting passages:' heading after 'Final answer:'"
    answer_region = block[fa.end():sp.start()]
    answer = answer_region.strip()
    cites = block[sp.end():].strip()
    problem, detail = None, ""
    if block[:fa.start()].strip():
        problem, detail = EXTRA_TEXT, "text before 'Final answer:'"
    elif not answer_region.rstrip(" \t").endswith("\n"):
        problem, detail = MISPLACED_HEADING, "'Supporting passages:' must start a new line"
    elif "\n" in answer:
        problem, detail = EXTRA_TEXT, "the final answer spans several lines"
    elif "\n" in cites:
        problem, detail = EXTRA_TEXT, "text after the 'Supporting passages:' line"
    if problem is not None:
        answer, cites = _first_line(answer), _first_line(cites)
    return answer, cites, problem, detail


def parse_completion(
    text: str, labels: Iterable[str] | None = None, *, max_chars: int = DEFAULT_MAX_CHARS
) -> ParsedCompletion:
    """Parse a completion in the RAG-RL format: answer, cited labels, and whether the format holds (and why not).

    ``labels`` are the labels of every passage shown with the question; give them to resolve labels containing
    commas and to return citations in their canonical spelling. ``max_chars`` is the "excessive length" bound.
    It never raises: a completion that breaks the format is returned with ``valid`` False and the first broken
    rule in ``reason``; the answer is extracted even then.

    Args:
        text: the completion's text.
        labels: the labels of every passage shown with the question (None: citations split on commas only).
        max_chars: completions longer than this are ``too_long``.

    Returns:
        The answer, the cited labels, ``valid``, ``reason`` (``missing_tag``, ``wrong_order``, ``too_long``, ...),
        ``detail`` and the reasoning.

    Examples:
        >>> from rag_curriculum.rewards import parse_completion
        >>> p = parse_completion("<reasoning>r</reasoning><answer>Final answer: yes\\nSupporting passages: A</answer>")
        >>> p.answer, p.citations, p.valid, p.reason
        ('yes', ('A',), True, None)
        >>> parse_completion("Final answer: 1952").answer, parse_completion("Final answer: 1952").reason
        ('1952', 'missing_tag')
    """
    names = _TAG_RE.findall(text)
    reason: str | None = None
    detail = ""
    reasoning = ""
    if len(names) == 4 and tuple(names) == _EXPECTED:
        r0 = text.find(_R_OPEN)
        r1 = r0 + len(_R_OPEN)
        r2 = text.find(_R_CLOSE, r1)
        r3 = r2 + len(_R_CLOSE)
        a0 = text.find(_A_OPEN, r3)
        a1 = a0 + len(_A_OPEN)
        a2 = text.find(_A_CLOSE, a1)
        a3 = a2 + len(_A_CLOSE)
        reasoning = text[r1:r2].strip()
        block = text[a1:a2]
        if text[:r0].strip() or text[r3:a0].strip() or text[a3:].strip():
            reason, detail = TEXT_OUTSIDE_TAGS, "text outside <reasoning> and <answer>"
    else:
        tags = [(m.group(), m.start(), m.end()) for m in _TAG_RE.finditer(text)]
        reason, detail = _structure_problem(names)
        block = _best_effort_block(text, tags)
        if _R_OPEN in names and _R_CLOSE in names:
            start = tags[names.index(_R_OPEN)][2]
            end = tags[names.index(_R_CLOSE)][1]
            reasoning = text[start:end].strip() if end >= start else ""
    answer, cites, problem, problem_detail = _read_block(block)
    if reason is None and problem is not None:
        reason, detail = problem, problem_detail
    if reason is None and not answer:
        reason, detail = EMPTY_ANSWER, "nothing after 'Final answer:'"
    if reason is None:
        ch = find_non_english(text)
        if ch is not None:
            reason, detail = NON_ENGLISH, f"non-English character {ch!r} (U+{ord(ch):04X})"
    if reason is None and len(text) > max_chars:
        reason, detail = TOO_LONG, f"{len(text)} characters, more than {max_chars}"
    citations = split_citations(cites, labels) if cites else ()
    return ParsedCompletion(answer, citations, reason is None, reason, detail, reasoning)


def _best_effort_block(text: str, tags: list[tuple[str, int, int]]) -> str:
    """The last ``<answer>`` block (to its ``</answer>``, the next ``<answer>`` or the end) that holds a ``Final
    answer:`` heading, else the last ``<answer>`` block, else the text from the last 'Final answer:'. (A model that
    repeats ``<answer>`` after its answer, as small base models do, leaves empty blocks after the one that answers.)
    """
    blocks: list[str] = []
    for k, (name, _, end) in enumerate(tags):
        if name != _A_OPEN:
            continue
        stop = next((s for n, s, _ in tags[k + 1:] if n in (_A_OPEN, _A_CLOSE)), len(text))
        blocks.append(text[end:stop])
    for block in reversed(blocks):
        if _FINAL_RE.search(block):
            return block
    if blocks:
        return blocks[-1]
    last = None
    for last in _FINAL_RE.finditer(text):  # noqa: B007 - we want the last match
        pass
    return text[last.start():] if last is not None else ""
