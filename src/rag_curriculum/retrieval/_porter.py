"""Martin Porter's stemmer as Lucene's ``PorterStemFilter`` runs it: the algorithm of Porter's own reference
implementation (which departs from the 1980 paper in three places: ``-bli`` becomes ``-ble`` where the paper has
``-abli`` to ``-able``, ``-logi`` becomes ``-log``, and a word of one or two letters is left alone), on code
points, every character other than ``a e i o u`` (and ``y`` after a consonant) a consonant, as Lucene's Java does.
PyStemmer's ``porter`` follows the paper instead (``anthology``: ``anthologi`` there, ``antholog`` in Lucene),
hence this module. Compiled by numba when it is installed (the same functions run as plain Python otherwise).

:func:`stem_many` stems words laid end to end in one code-point array, in place (a stem is never longer than its
word).
"""

from __future__ import annotations

try:  # compiled by numba where it is installed; the same functions run as plain Python otherwise
    import numba
except ImportError:  # pragma: no cover
    numba = None

_A, _E, _I, _O, _U, _Y = 97, 101, 105, 111, 117, 121


def _vowel(c):
    return c == _A or c == _E or c == _I or c == _O or c == _U


def _cons(b, i):
    """Whether ``b[i]`` is a consonant: not a e i o u, and a ``y`` only at the start or after a vowel (so in a run
    of y's they alternate)."""
    c = b[i]
    if _vowel(c):
        return False
    if c != _Y:
        return True
    p = i
    while p > 0 and b[p - 1] == _Y:
        p -= 1
    first = True if p == 0 else _vowel(b[p - 1])  # the run's first y
    return first if (i - p) % 2 == 0 else not first


def _m(b, j):
    """The number of vowel-consonant sequences in ``b[0..j]``."""
    n = 0
    i = 0
    while True:
        if i > j:
            return n
        if not _cons(b, i):
            break
        i += 1
    i += 1
    while True:
        while True:
            if i > j:
                return n
            if _cons(b, i):
                break
            i += 1
        i += 1
        n += 1
        while True:
            if i > j:
                return n
            if not _cons(b, i):
                break
            i += 1
        i += 1


def _vowel_in(b, j):
    for i in range(j + 1):
        if not _cons(b, i):
            return True
    return False


def _double(b, j):
    return j >= 1 and b[j] == b[j - 1] and _cons(b, j)


def _cvc(b, i):
    if i < 2 or not _cons(b, i) or _cons(b, i - 1) or not _cons(b, i - 2):
        return False
    c = b[i]
    return not (c == 119 or c == 120 or c == _Y)  # w x y


def _ends(b, k, s):
    """Whether ``b[0..k]`` ends with ``s`` (a code-point array); the stem's last index then is ``k - len(s)``."""
    n = s.shape[0]
    if n > k + 1:
        return False
    for i in range(n):
        if b[k - n + 1 + i] != s[i]:
            return False
    return True


def _setto(b, j, s):
    """``s`` after ``b[0..j]``; the new last index."""
    for i in range(s.shape[0]):
        b[j + 1 + i] = s[i]
    return j + s.shape[0]


def _replace(b, k, old, new, need_m):
    """If ``b[0..k]`` ends with ``old``: (True, k after replacing it by ``new`` when the stem's measure is above
    ``need_m``); else (False, k)."""
    if not _ends(b, k, old):
        return False, k
    j = k - old.shape[0]
    if _m(b, j) > need_m:
        return True, _setto(b, j, new)
    return True, k


def _stem(b, k, rules):
    """Stem ``b[0..k]`` in place; the new last index. ``rules``: the suffix tables (see :func:`_rules`)."""
    if k <= 1:
        return k
    (sses, ies, eed, ed, ing, at, ate, bl, ble, iz, ize, y, step2_old, step2_new, step3_old, step3_new,
     step4, ion) = rules
    # step 1ab: plurals, -ed, -ing
    if b[k] == 115:  # s
        if _ends(b, k, sses):
            k -= 2
        elif _ends(b, k, ies):
            k = _setto(b, k - 3, ies[:1])
        elif b[k - 1] != 115:
            k -= 1
    if _ends(b, k, eed):
        if _m(b, k - 3) > 0:
            k -= 1
    else:
        j = -1
        if _ends(b, k, ed) and _vowel_in(b, k - 2):
            j = k - 2
        elif _ends(b, k, ing) and _vowel_in(b, k - 3):
            j = k - 3
        if j >= 0:
            k = j
            if _ends(b, k, at):
                k = _setto(b, k - 2, ate)
            elif _ends(b, k, bl):
                k = _setto(b, k - 2, ble)
            elif _ends(b, k, iz):
                k = _setto(b, k - 2, ize)
            elif _double(b, k):
                c = b[k]
                if not (c == 108 or c == 115 or c == 122):  # l s z
                    k -= 1
            elif _m(b, k) == 1 and _cvc(b, k):
                k = _setto(b, k, ate[2:])  # "e"
    # step 1c: y -> i after a vowel in the stem
    if _ends(b, k, y) and _vowel_in(b, k - 1):
        b[k] = _I
    # step 2 (the suffix table, first match wins; m > 0)
    if k >= 1:
        for r in range(len(step2_old)):
            hit, k2 = _replace(b, k, step2_old[r], step2_new[r], 0)
            if hit:
                k = k2
                break
    # step 3
    for r in range(len(step3_old)):
        hit, k2 = _replace(b, k, step3_old[r], step3_new[r], 0)
        if hit:
            k = k2
            break
    # step 4: drop a suffix where m > 1
    if k >= 1:
        for r in range(len(step4)):
            s = step4[r]
            if _ends(b, k, s):
                j = k - s.shape[0]
                if s.shape[0] == 3 and s[0] == ion[0] and s[1] == ion[1] and s[2] == ion[2]:
                    if j < 0 or not (b[j] == 115 or b[j] == 116):  # -ion after s or t only
                        continue
                if _m(b, j) > 1:
                    k = j
                break
    # step 5: a final e; -ll
    if b[k] == _E:
        a = _m(b, k - 1)
        if a > 1 or (a == 1 and not _cvc(b, k - 1)):
            k -= 1
    if b[k] == 108 and _double(b, k) and _m(b, k) > 1:
        k -= 1
    return k


def stem_words(buf, starts, lengths, out, rules):
    """Stem each word ``buf[starts[i]:starts[i] + lengths[i]]`` in place; its new length into ``out[i]``."""
    for i in range(starts.shape[0]):
        s = starts[i]
        b = buf[s:s + lengths[i]]
        out[i] = _stem(b, lengths[i] - 1, rules) + 1


def _arr(word):
    import numpy as np

    return np.array([ord(c) for c in word], dtype=np.uint32)


def _rules():
    """The suffix tables, as numba-typed lists of code-point arrays (plain lists without numba)."""
    step2 = [("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
             ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
             ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
             ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("logi", "log")]
    step3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
             ("ness", "")]
    step4 = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
             "ate", "iti", "ous", "ive", "ize"]
    try:
        from numba.typed import List
    except ImportError:
        List = list  # noqa: N806
    def lst(words):  # noqa: E306
        out = List()
        for w in words:
            out.append(_arr(w))
        return out
    return (_arr("sses"), _arr("ies"), _arr("eed"), _arr("ed"), _arr("ing"), _arr("at"), _arr("ate"), _arr("bl"),
            _arr("ble"), _arr("iz"), _arr("ize"), _arr("y"), lst([o for o, _ in step2]), lst([n for _, n in step2]),
            lst([o for o, _ in step3]), lst([n for _, n in step3]), lst(step4), _arr("ion"))


_COMPILED = None


def compiled():
    """(stem_words, rules): compiled by numba (cached on disk) where it is installed."""
    global _COMPILED
    if _COMPILED is None:
        try:
            from numba import njit
        except ImportError:
            _COMPILED = (stem_words, _rules())
        else:
            g = globals()
            for name in ("_vowel", "_cons", "_m", "_vowel_in", "_double", "_cvc", "_ends", "_setto", "_replace"):
                g[name] = njit(cache=True, nogil=True, inline="always")(g[name])
            for name in ("_stem", "stem_words"):
                g[name] = njit(cache=True, nogil=True)(g[name])
            _COMPILED = (g["stem_words"], _rules())
    return _COMPILED


def stem_many(words: list[str]) -> list[str]:
    """Porter stems of ``words`` (Lucene's), in order."""
    import numpy as np

    if not words:
        return []
    fn, rules = compiled()
    joined = "".join(words)
    buf = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    out = np.empty(len(words), dtype=np.int64)
    fn(buf, starts, lengths, out, rules)
    text = buf.tobytes().decode("utf-32-le", "surrogatepass")
    return [text[s:s + n] for s, n in zip(starts.tolist(), out.tolist(), strict=True)]
