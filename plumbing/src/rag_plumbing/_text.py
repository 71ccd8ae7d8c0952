"""Paths and text as an index records them: a path made portable (relative to the index, else its file name), a
command line with its paths made portable, and the SQuAD / HotpotQA answer normalisation of a passage's text (the
``norms`` column, what a host's answer test searches). A copy of rag-curriculum's, whose answer tests must read
the same normalisation (its tests compare the two).

>>> normalize_answer("A.P.J. Abdul Kalam"), normalize_answer("3 a.m."), normalize_answer("Ålesund")
('apj abdul kalam', '3 am', 'ålesund')
"""

from __future__ import annotations

import os
import re
import shlex
import string
from pathlib import Path

# ASCII punctuation deleted from the UTF-8 bytes: the same as deleting the characters (no byte of a multi-byte UTF-8
# sequence is ASCII; lone surrogates pass through as 3-byte sequences), and several times faster than str.translate
_PUNCT_BYTES = string.punctuation.encode()
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_ARTICLES = frozenset(("a", "an", "the"))


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 / HotpotQA answer normalisation: lower, drop punctuation, drop articles, collapse whitespace (the
    one rule of the toolkit's scores and the index's "contains an answer" test).

    >>> normalize_answer("A.P.J. Abdul Kalam"), normalize_answer("3 a.m."), normalize_answer("Ålesund")
    ('apj abdul kalam', '3 am', 'ålesund')
    """
    s = s.lower().encode("utf-8", "surrogatepass").translate(None, _PUNCT_BYTES).decode("utf-8", "surrogatepass")
    words = s.split()
    if "a" in s or "the" in s:  # every article contains an "a" or is "the": nothing to drop when neither occurs
        # The regex a word at a time (what it does to the whole string: whitespace is never a word character, so
        # its \b sees the same at a word's ends), and only on words with a non-word character: one of word
        # characters alone (str.isalnum, as \w without "_") matches only if it is an article, a set lookup.
        kept = []
        for w in words:
            if w.isalnum():
                if w not in _ARTICLES:
                    kept.append(w)
            else:
                kept.extend(_ARTICLES_RE.sub(" ", w).split())
        words = kept
    return " ".join(words)


def relative_path(path: str | Path, base: str | Path) -> str | None:
    """``path`` relative to ``base`` when it lies inside it or beside it (``../other``), else None."""
    p = os.path.abspath(path)
    try:
        rel = Path(os.path.relpath(p, os.path.abspath(base)))
    except ValueError:  # another drive
        return None
    ups = 0
    for part in rel.parts:
        if part != "..":
            break
        ups += 1
    return rel.as_posix() if ups <= 1 and rel.parts[ups:] else None


def portable_path(path: str | Path, base: str | Path) -> str:
    """A local path as a manifest records it: relative to ``base`` when inside or beside it, else its name."""
    return relative_path(path, base) or Path(os.path.abspath(path)).name


def _portable_token(token: str, base: str | Path) -> str:
    if "=" in token and not token.startswith("/"):
        key, _, value = token.partition("=")
        if os.path.isabs(value):
            return f"{key}={portable_path(value, base)}"
    return portable_path(token, base) if os.path.isabs(token) and token != "/" else token


def portable_command(command: str, base: str | Path) -> str:
    """A command line with its absolute paths (``/x/y``, ``--out=/x``) made portable."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return command
    new = [_portable_token(t, base) for t in tokens]
    return command if new == tokens else shlex.join(new)
