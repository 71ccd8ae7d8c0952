"""What a retriever and its clients agree on: a passage's identity (:func:`passage_hash`), the text an answer is
looked for in (:func:`normalize_passage`), the ``contents`` field of
Search-R1's ``/retrieve`` protocol (:func:`split_contents`) and the number of passages a search may ask for
(:func:`check_k`). rag-retriever's server and index answer by these rules; rag-curriculum's search agents read the
answers by them, with or without rag-retriever installed (a remote server).

>>> passage_hash("Ada", "born  in Rome") == passage_hash("ada", "Born in Rome")
True
>>> split_contents('"Ada Lovelace"\\nAda was a mathematician.')
('Ada Lovelace', 'Ada was a mathematician.')
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from ._errors import SettingError
from ._seeds import hash64
from ._text import normalize_answer

__all__ = ["check_k", "normalize_passage", "passage_hash", "split_contents"]


def passage_hash(title: str, text: str) -> int:
    """A stable 64-bit hash (BLAKE2b) of a passage's title and text with whitespace runs collapsed and case folded:
    two passages with equal hashes are copies of each other."""
    key = " ".join(title.split()).casefold() + "\x00" + " ".join(text.split()).casefold()
    return hash64(key, byteorder="little", signed=True)


def normalize_passage(title: str, text: str) -> str:
    """``" " + normalize_answer(title + " " + text) + " "``: a passage as the "contains an answer" test reads it (an
    answer ``a``, normalised, is in the passage when ``f" {a} "`` is a substring of this)."""
    return f" {normalize_answer(f'{title} {text}')} "


def split_contents(contents: str) -> tuple[str, str]:
    """A ``contents`` string of the FlashRAG / Search-R1 layout as (title, text): the title is its first line, the
    text the rest (no newline: no title, all text); a title in double quotes, as in Search-R1's wiki-18 dump
    (``"\\"Title\\"\\ntext"``), loses one pair of them (for matching and ranking; the line itself is kept)."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text


def check_k(k: Any, *, error: Callable[..., Exception] = SettingError) -> int:
    """``k``, the number of passages a search asks for, as an int: 0 or more (0: no passages), else ``error`` (a
    :class:`~rag_plumbing._errors.SettingError` by default, a ``ValueError``); the same rule for every kind and the
    HTTP client."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise error("k", k, "an integer >= 0 (the number of passages to return; 0 returns none)")
    return int(k)
