"""Lucene's ``StandardTokenizer`` (Lucene 9.5, as pyserini 0.22.1's Anserini runs it): Unicode UAX#29 word
breaking as Lucene's grammar (``StandardTokenizerImpl.jflex``, Unicode 9 properties, emoji data 11) specifies it,
written here as a scan over a per-code-point class table (``uax29_table.json``, which says how it was made), compiled by numba when it is
installed (the same functions run as plain Python otherwise: slow, the same tokens).

At each position the tokenizer takes the **longest** match of Lucene's token rules, as its JFlex scanner does:

* a word (``ALPHANUM`` / ``NUM`` / ``KATAKANA`` / ``HANGUL``): letters and digits joined as UAX#29 rules WB5-WB13b
  join them: letters and digits together (``3.5GHz``), ``MidLetter`` / ``MidNumLet`` / ``'`` between two letters
  (``o'neil``, ``node.js``), ``MidNum`` / ``MidNumLet`` / ``'`` between two digits (``1,234.56``), ``_`` and the
  other ``ExtendNumLet`` anywhere next to them, a Hebrew letter followed by ``'`` or by ``"`` and a Hebrew letter,
  katakana together;
* an emoji sequence (presentation, modifier, ZWJ, keycap, flag and tag sequences; ``©``, ``®`` and ``™`` too);
* a run of South-East Asian letters (``Line_Break=Complex_Context``: Thai, Lao, Myanmar, Khmer);
* one Han ideograph, one hiragana;

each with the ``Extend`` / ``Format`` / ``ZWJ`` characters that follow it. Everything else is skipped. A match
is at most 255 UTF-16 code units long (Lucene's ``maxTokenLength``: its scanner's buffer), so a longer word is cut
there and the rest scanned on its own.
"""

from __future__ import annotations

try:  # compiled by numba where it is installed; the same functions run as plain Python otherwise
    import numba
except ImportError:  # pragma: no cover
    numba = None

# the low 4 bits of a class: the character's word-break value (UAX#29, as Lucene's grammar reads it)
OTHER, ALETTER, HEBREW, NUMERIC, KATAKANA, MIDLETTER, MIDNUM, MIDNUMLET, SQUOTE, DQUOTE, EXTNUMLET, EXTEND, ZWJ, \
    REGIONAL, PRESSEL = range(15)
# flags above them
SEA, HAN, HIRAGANA, EMOJI, EMOJI_BASE, EMOJI_MOD, KEYCAP_BASE = 16, 32, 64, 128, 256, 512, 1024
MAX_TOKEN = 255  # UTF-16 code units


def _skip_x(cls, cps, i, n):
    """Past the Extend / Format / ZWJ characters (presentation selectors included) from ``i``."""
    while i < n:
        w = cls[cps[i]] & 15
        if w == EXTEND or w == ZWJ or w == PRESSEL:
            i += 1
        else:
            break
    return i


def _skip_xs(cls, cps, i, n):
    """Past the Extend / Format / ZWJ characters from ``i``, presentation selectors (U+FE0E, U+FE0F) excepted."""
    while i < n:
        w = cls[cps[i]] & 15
        if w == EXTEND or w == ZWJ:
            i += 1
        else:
            break
    return i


def _word(cls, cps, p, n):
    """End of the longest word match at ``p`` (``p``: none)."""
    i = p
    accept = p
    seen = False
    prev = 0  # 0 start, ALETTER, HEBREW, NUMERIC, KATAKANA, EXTNUMLET; 99: a Hebrew letter and its single quote
    while i < n:
        w = cls[cps[i]] & 15
        if w == EXTNUMLET:
            i = _skip_x(cls, cps, i + 1, n)
            prev = EXTNUMLET
            if seen:
                accept = i
            continue
        if w == ALETTER or w == HEBREW or w == NUMERIC or w == KATAKANA:
            if prev == 0 or prev == EXTNUMLET:
                ok = True
            elif w == KATAKANA:
                ok = prev == KATAKANA
            else:
                ok = prev == ALETTER or prev == HEBREW or prev == NUMERIC or prev == 99
            if not ok:
                break
            i = _skip_x(cls, cps, i + 1, n)
            prev = w
            seen = True
            accept = i
            continue
        if MIDLETTER <= w <= DQUOTE and seen:
            j = _skip_x(cls, cps, i + 1, n)
            w2 = cls[cps[j]] & 15 if j < n else OTHER
            if (prev == ALETTER or prev == HEBREW) and (w == MIDLETTER or w == MIDNUMLET or w == SQUOTE) \
                    and (w2 == ALETTER or w2 == HEBREW):
                i = _skip_x(cls, cps, j + 1, n)
                prev = w2
                accept = i
                continue
            if prev == NUMERIC and (w == MIDNUM or w == MIDNUMLET or w == SQUOTE) and w2 == NUMERIC:
                i = _skip_x(cls, cps, j + 1, n)
                accept = i
                continue
            if prev == HEBREW and w == DQUOTE and w2 == HEBREW:
                i = _skip_x(cls, cps, j + 1, n)
                accept = i
                continue
            if prev == HEBREW and w == SQUOTE:
                i = j
                prev = 99
                accept = i
                continue
        break
    return accept


def _emoji_seq(cls, cps, p, n):
    """End of the longest emoji character, presentation or modifier sequence at ``p`` (``p``: none)."""
    i = p
    while i < n and cps[i] == 0x200D:
        i += 1
    if i >= n:
        return p
    c = cls[cps[i]]
    best = p
    if c & EMOJI:
        e = _skip_xs(cls, cps, i + 1, n)
        if e < n and cps[e] == 0xFE0F:
            e += 1
        best = e
    if c & EMOJI_BASE:
        k = _skip_xs(cls, cps, i + 1, n)
        if k < n and cls[cps[k]] & EMOJI_MOD:
            e = _skip_xs(cls, cps, k + 1, n)
            if e > best:
                best = e
    if i == p and c & EMOJI_MOD:
        e = _skip_xs(cls, cps, p + 1, n)
        if e > best:
            best = e
    return best


def _emoji(cls, cps, p, n):
    """End of the longest emoji match at ``p`` (``p``: none)."""
    best = p
    c = cls[cps[p]]
    if c & KEYCAP_BASE:  # [0-9#*] XS* U+FE0F? U+20E3 XS*, where XS* may hold U+20E3 itself
        j = _skip_xs(cls, cps, p + 1, n)
        if j + 1 < n and cps[j] == 0xFE0F and cps[j + 1] == 0x20E3:
            best = _skip_xs(cls, cps, j + 2, n)
        else:
            for i in range(p + 1, j):
                if cps[i] == 0x20E3:
                    best = j
                    break
    if c & 15 == REGIONAL:
        j = _skip_x(cls, cps, p + 1, n)
        if j < n and cls[cps[j]] & 15 == REGIONAL:
            j = _skip_x(cls, cps, j + 1, n)
            if j > best:
                best = j
    e = _emoji_seq(cls, cps, p, n)
    while e > p and e < n and (cps[e - 1] == 0x200D or cps[e] == 0x200D):  # ( ZWJ sequence )*
        f = _emoji_seq(cls, cps, e, n)
        if f == e or (cps[e - 1] != 0x200D and cps[e] != 0x200D):
            break
        e = f
    return e if e > best else best


def _match(cls, cps, p, n):
    """End of the longest token match at ``p`` within ``[p, n)`` (``p``: none)."""
    best = _word(cls, cps, p, n)
    c = cls[cps[p]]
    if c & (EMOJI | EMOJI_BASE | EMOJI_MOD | KEYCAP_BASE) or c & 15 == REGIONAL or cps[p] == 0x200D:
        e = _emoji(cls, cps, p, n)
        if e > best:
            best = e
    if c & SEA:
        i = p
        while i < n and cls[cps[i]] & SEA:
            i = _skip_x(cls, cps, i + 1, n)
        if i > best:
            best = i
    if c & (HAN | HIRAGANA):
        e = _skip_x(cls, cps, p + 1, n)
        if e > best:
            best = e
    return best


def _window(cps, p, n):
    """The end of the 255 UTF-16 code units from ``p`` (Lucene's longest token)."""
    units = 0
    i = p
    while i < n:
        u = 2 if cps[i] > 0xFFFF else 1
        if units + u > MAX_TOKEN:
            break
        units += u
        i += 1
    return i


def tokenize_spans(cls, lower, cps, doc_ends, starts, ends, counts, possessive=True):
    """Tokens of the documents ``cps[doc_ends[d-1]:doc_ends[d]]`` (code points): each token's span (``starts``,
    ``ends``; a possessive ``'s`` cut, as Lucene's ``EnglishPossessiveFilter`` cuts it, unless ``possessive`` is
    false), the tokens of each document
    (``counts``); ``cps`` is lowercased in place through ``lower`` (Java's ``Character.toLowerCase``, applied to a
    token's characters as Lucene's ``LowerCaseFilter`` does). Returns the number of tokens (``starts`` and ``ends``
    must hold one per code point)."""
    t = 0
    s = 0
    for d in range(doc_ends.shape[0]):
        n = doc_ends[d]
        t0 = t
        p = s
        while p < n:
            e = _match(cls, cps, p, n)
            if e - p > 127:  # may pass 255 UTF-16 code units: the longest match inside them
                e = _match(cls, cps, p, _window(cps, p, n))
            if e == p:
                p += 1
                continue
            for i in range(p, e):
                c = cps[i]
                if c < lower.shape[0]:
                    cps[i] = lower[c]
            end = e
            if possessive and e - p >= 2 and (cps[e - 1] == 0x73 or cps[e - 1] == 0x53) and (cps[e - 2] == 0x27 or cps[e - 2] == 0x2019
                                                         or cps[e - 2] == 0xFF07):
                end = e - 2
            starts[t] = p
            ends[t] = end
            t += 1
            p = e
        counts[d] = t - t0
        s = n
    return t


def compile_all():
    """The scan compiled by numba (cached on disk), or these plain functions where numba is not installed."""
    try:
        from numba import njit
    except ImportError:
        return tokenize_spans
    g = globals()
    for name in ("_skip_x", "_skip_xs", "_word"):  # no call (nor reference count) a character
        g[name] = njit(cache=True, nogil=True, inline="always")(g[name])
    for name in ("_emoji_seq", "_emoji", "_match", "_window"):
        g[name] = njit(cache=True, nogil=True)(g[name])
    g["tokenize_spans"] = njit(cache=True, nogil=True)(g["tokenize_spans"])
    return g["tokenize_spans"]


# -- bm25s's splitter, for the bm25s preset -------------------------------------------------------------------------
def word_spans(isword, cps, doc_ends, starts, ends, counts):
    """bm25s's ``(?u)\\b\\w\\w+\\b`` on each document: the maximal runs of word characters (``isword``: Python's
    ``\\w``, per code point), two or more long. Returns the number of tokens."""
    t = 0
    s = 0
    for d in range(doc_ends.shape[0]):
        n = doc_ends[d]
        t0 = t
        p = s
        while p < n:
            if cps[p] < isword.shape[0] and isword[cps[p]]:
                e = p + 1
                while e < n and cps[e] < isword.shape[0] and isword[cps[e]]:
                    e += 1
                if e - p >= 2:
                    starts[t] = p
                    ends[t] = e
                    t += 1
                p = e
            else:
                p += 1
        counts[d] = t - t0
        s = n
    return t


# -- surfaces to ids without making strings: a table keyed on two 64-bit hashes of each token -------------------
_M1 = 1099511628211
_M2 = 0x9E3779B97F4A7C15


def hash_spans(cps, starts, ends, t, h1, h2):
    """Two independent 64-bit hashes of each token's code points (h1 never 0: 0 marks an empty slot)."""
    for i in range(t):
        a = np_u64(14695981039346656037)
        b = np_u64(0x243F6A8885A308D3)
        for j in range(starts[i], ends[i]):
            c = np_u64(cps[j])
            a = (a ^ c) * np_u64(_M1)
            b = (b + c + np_u64(1)) * np_u64(_M2)
            b ^= b >> np_u64(29)
        n = np_u64(ends[i] - starts[i])
        h1[i] = a ^ (n << np_u64(56)) | np_u64(1)
        h2[i] = b ^ n


def table_lookup(keys1, keys2, vals, h1, h2, t, out, first, slots):
    """Each token's id from the table (open addressing, linear probing; ``len(keys1)`` a power of two); a token not
    there is inserted with ``-2 - j`` (``j``: its rank among this call's new tokens, whose first occurrence goes to
    ``first[j]`` and whose slot to ``slots[j]``). Returns the number of new tokens."""
    mask = keys1.shape[0] - 1
    nnew = 0
    for i in range(t):
        a = h1[i]
        b = h2[i]
        slot = np_i64(a & np_u64(mask))
        while True:
            k = keys1[slot]
            if k == 0:
                keys1[slot] = a
                keys2[slot] = b
                vals[slot] = -2 - nnew
                first[nnew] = i
                slots[nnew] = slot
                out[i] = -2 - nnew
                nnew += 1
                break
            if k == a and keys2[slot] == b:
                out[i] = vals[slot]
                break
            slot = (slot + 1) & mask
    return nnew


def table_resolve(vals, slots, nnew, out, t, new_ids):
    """Placeholders ``-2 - j`` (in the table, at ``slots[j]``, and in ``out``) replaced by ``new_ids[j]``: the new
    tokens' slots only (a scan of the whole table for each block of passages grew with the vocabulary)."""
    for j in range(nnew):
        vals[slots[j]] = new_ids[j]
    for i in range(t):
        v = out[i]
        if v <= -2:
            out[i] = new_ids[-2 - v]


def table_grow(keys1, keys2, vals, new1, new2, newv):
    mask = new1.shape[0] - 1
    for s in range(keys1.shape[0]):
        a = keys1[s]
        if a != 0:
            slot = np_i64(a & np_u64(mask))
            while new1[slot] != 0:
                slot = (slot + 1) & mask
            new1[slot] = a
            new2[slot] = keys2[s]
            newv[slot] = vals[s]


def np_u64(v):  # replaced by numba's uint64 when compiled
    import numpy as np

    return np.uint64(v)


def np_i64(v):
    return int(v)


_HASH_KERNELS = None


def hash_kernels():
    """(word_spans, hash_spans, table_lookup, table_resolve, table_grow), compiled where numba is installed."""
    global _HASH_KERNELS
    if _HASH_KERNELS is None:
        g = globals()
        names = ("word_spans", "hash_spans", "table_lookup", "table_resolve", "table_grow")
        try:
            from numba import int64, njit, uint64
        except ImportError:
            pass
        else:
            g["np_u64"], g["np_i64"] = uint64, int64
            for name in names:
                g[name] = njit(cache=True, nogil=True)(g[name])
        _HASH_KERNELS = tuple(g[name] for name in names)
    return _HASH_KERNELS
