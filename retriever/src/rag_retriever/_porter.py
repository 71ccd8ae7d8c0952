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


def _skip(b, i, j, cons):
    """The first index from ``i`` whose letter is not a consonant (``cons``) or not a vowel; ``j + 1`` or more
    where ``b[i..j]`` holds none."""
    while i <= j and _cons(b, i) == cons:
        i += 1
    return i


def _m(b, j):
    """The number of vowel-consonant sequences in ``b[0..j]``."""
    n = 0
    i = _skip(b, 0, j, True)  # the consonants it starts with
    while True:
        i = _skip(b, i, j, False)  # a run of vowels
        if i > j:
            return n
        i = _skip(b, i, j, True)  # then a run of consonants: one sequence more
        n += 1


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


def _ends(b, k, chars, offs, r):
    """Whether ``b[0..k]`` ends with suffix ``r`` of the table; the stem's last index then is ``k - len``."""
    lo, hi = offs[r], offs[r + 1]
    n = hi - lo
    if n > k + 1:
        return False
    for i in range(n):
        if b[k - n + 1 + i] != chars[lo + i]:
            return False
    return True


def _setto(b, j, chars, offs, r):
    """Suffix ``r`` of the table after ``b[0..j]``; the new last index."""
    lo, hi = offs[r], offs[r + 1]
    for i in range(hi - lo):
        b[j + 1 + i] = chars[lo + i]
    return j + hi - lo


def _stem(b, k, chars, offs):
    """Stem ``b[0..k]`` in place; the new last index. ``chars`` / ``offs``: the suffix table (:data:`SUFFIXES`)."""
    if k <= 1:
        return k
    # step 1ab: plurals, -ed, -ing
    if b[k] == 115:  # s
        if _ends(b, k, chars, offs, _SSES):
            k -= 2
        elif _ends(b, k, chars, offs, _IES):
            k = _setto(b, k - 3, chars, offs, _I1)
        elif b[k - 1] != 115:
            k -= 1
    if _ends(b, k, chars, offs, _EED):
        if _m(b, k - 3) > 0:
            k -= 1
    else:
        j = -1
        if _ends(b, k, chars, offs, _ED) and _vowel_in(b, k - 2):
            j = k - 2
        elif _ends(b, k, chars, offs, _ING) and _vowel_in(b, k - 3):
            j = k - 3
        if j >= 0:
            k = j
            if _ends(b, k, chars, offs, _AT):
                k = _setto(b, k - 2, chars, offs, _ATE)
            elif _ends(b, k, chars, offs, _BL):
                k = _setto(b, k - 2, chars, offs, _BLE)
            elif _ends(b, k, chars, offs, _IZ):
                k = _setto(b, k - 2, chars, offs, _IZE)
            elif _double(b, k):
                c = b[k]
                if not (c == 108 or c == 115 or c == 122):  # l s z
                    k -= 1
            elif _m(b, k) == 1 and _cvc(b, k):
                k = _setto(b, k, chars, offs, _E1)
    # step 1c: y -> i after a vowel in the stem
    if _ends(b, k, chars, offs, _YS) and _vowel_in(b, k - 1):
        b[k] = _I
    # steps 2 and 3: the first suffix of the table that ends the word; replaced where the stem's measure is > 0
    for lo, hi in ((_STEP2, _STEP3), (_STEP3, _STEP4)):
        if lo == _STEP2 and k < 1:
            continue
        for r in range(lo, hi, 2):
            if _ends(b, k, chars, offs, r):
                j = k - (offs[r + 1] - offs[r])
                if _m(b, j) > 0:
                    k = _setto(b, j, chars, offs, r + 1)
                break
    # step 4: drop a suffix where m > 1
    if k >= 1:
        for r in range(_STEP4, _END):
            if _ends(b, k, chars, offs, r):
                j = k - (offs[r + 1] - offs[r])
                if r == _ION and (j < 0 or not (b[j] == 115 or b[j] == 116)):  # -ion after s or t only
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


def stem_words(buf, starts, lengths, out, chars, offs):
    """Stem each word ``buf[starts[i]:starts[i] + lengths[i]]`` in place; its new length into ``out[i]``."""
    for i in range(starts.shape[0]):
        s = starts[i]
        b = buf[s:s + lengths[i]]
        out[i] = _stem(b, lengths[i] - 1, chars, offs) + 1


#: The suffix table: the fixed strings, then step 2's and step 3's (old, new) pairs and step 4's suffixes, in the
#: reference implementation's order (the first that ends a word is the one that applies).
_FIXED = ["sses", "ies", "i", "eed", "ed", "ing", "at", "ate", "bl", "ble", "iz", "ize", "e", "y"]
_STEP2_PAIRS = [("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
                ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"),
                ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
                ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"), ("logi", "log")]
_STEP3_PAIRS = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
                ("ness", "")]
_STEP4_LIST = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
               "ate", "iti", "ous", "ive", "ize"]
SUFFIXES = _FIXED + [x for pair in _STEP2_PAIRS for x in pair] + [x for pair in _STEP3_PAIRS for x in pair] \
    + _STEP4_LIST
(_SSES, _IES, _I1, _EED, _ED, _ING, _AT, _ATE, _BL, _BLE, _IZ, _IZE, _E1, _YS) = range(len(_FIXED))
_STEP2 = len(_FIXED)
_STEP3 = _STEP2 + 2 * len(_STEP2_PAIRS)
_STEP4 = _STEP3 + 2 * len(_STEP3_PAIRS)
_END = _STEP4 + len(_STEP4_LIST)
_ION = _STEP4 + _STEP4_LIST.index("ion")


def _table():
    import numpy as np

    chars = np.array([ord(c) for w in SUFFIXES for c in w], dtype=np.uint32)
    offs = np.zeros(len(SUFFIXES) + 1, dtype=np.int64)
    np.cumsum([len(w) for w in SUFFIXES], out=offs[1:])
    return chars, offs


_COMPILED = None


def compiled():
    """(stem_words, chars, offs): compiled by numba (cached on disk) where it is installed."""
    global _COMPILED
    if _COMPILED is None:
        g = globals()
        if numba is not None:
            from numba import njit

            for name in ("_vowel", "_cons"):
                g[name] = njit(cache=True, nogil=True, inline="always")(g[name])
            for name in ("_skip", "_m", "_vowel_in", "_double", "_cvc", "_ends", "_setto", "_stem", "stem_words"):
                g[name] = njit(cache=True, nogil=True)(g[name])
        _COMPILED = (g["stem_words"], *_table())
    return _COMPILED


def stem_many(words: list[str]) -> list[str]:
    """Porter stems of ``words`` (Lucene's), in order."""
    import numpy as np

    if not words:
        return []
    fn, chars, offs = compiled()
    joined = "".join(words)
    buf = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    out = np.empty(len(words), dtype=np.int64)
    fn(buf, starts, lengths, out, chars, offs)
    text = buf.tobytes().decode("utf-32-le", "surrogatepass")
    return [text[s:s + n] for s, n in zip(starts.tolist(), out.tolist(), strict=True)]
