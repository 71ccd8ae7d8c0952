"""The passage store (``passages.bin``, ``norms.bin``: small zlib blocks against a preset dictionary): written a
block of passages at a time in bounded memory, the same bytes however the build was paced, read back field for
field (nulls, newlines, any Unicode), the answer test's spans equal to ``in`` on the normalised text, smaller than
the text it holds, and a damaged file refused."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN, TWOWIKI_TRAIN
from rag_retriever import _store
from rag_retriever._corpus import Passages, passage_blocks


@pytest.fixture(scope="module")
def real(shared_data):
    """The real paragraphs of two shared files, with corpus-like ids and prefixes on a third of them."""
    rows = []
    for name, path in (("musique", MUSIQUE_TRAIN), ("2wikimultihopqa", TWOWIKI_TRAIN)):
        for block in passage_blocks(name, str(path), None):
            rows += zip(block.titles, block.texts, strict=True)
    out = []
    for i, (t, x) in enumerate(rows):
        if i % 3 == 0:  # a corpus line: its own id and contents prefix (a quoted title, as wiki-18 has it)
            out.append((t, x, "corpus", f"wiki-{i}", f'"{t}"\n'))
        else:
            out.append((t, x, "dataset", None, None))
    return out


def _blocks(rows, size):
    for a in range(0, len(rows), size):
        b = Passages()
        for t, x, o, pid, pre in rows[a:a + size]:
            b.add(t, x, o, pid, pre)
        yield b


class _Store(_store.PassageStore):
    def __init__(self, d, n):
        problems = self._open_store(d, {"passages": n, "questions": 0, "depth": 0})
        assert not problems, problems


def _write(d, rows, size, *, check_memory=False):
    d.mkdir(parents=True, exist_ok=True)
    w = _store.StoreWriter(d)
    for b in _blocks(rows, size):
        w.add(b)
        if check_memory:  # what it holds: at most the dictionary's sample (or a block of norms) and a block of the build
            assert len(w._docs._held) <= _store.SAMPLE_ROWS + size
            assert len(w._norms._held) < _store.NORM_ROWS + size
    w.finish([], [], [])
    np.save(d / _store.RANKED_IDS, np.zeros((0, 0), np.int32))
    np.save(d / _store.RANKED_SCORES, np.zeros((0, 0), np.float32))
    return w


@pytest.mark.slow
@pytest.mark.parametrize("sample", [1 << 16, 500])  # the dictionary made after the last passage, or mid-stream
def test_the_same_bytes_whatever_the_pacing_and_every_field_read_back(real, tmp_path, monkeypatch, sample):
    monkeypatch.setattr(_store, "SAMPLE_ROWS", sample)
    files = (_store.PASSAGES, _store.NORMS, _store.KEYS)
    written = {}
    for size in (7, 300, 1 << 16):
        w = _write(tmp_path / str(size), real, size, check_memory=True)
        written[size] = [(tmp_path / str(size) / f).read_bytes() for f in files]
        assert w.rows == len(real)
    assert written[7] == written[300] == written[1 << 16]
    s = _Store(tmp_path / "7", len(real))
    pids = list(range(len(real)))
    assert s.rows(pids) == [tuple(r) for r in real]
    assert [s.passage(p) for p in (0, 1, len(real) - 1)] == [real[p][:2] for p in (0, 1, len(real) - 1)]
    assert [s.norm(p) for p in pids] == [_store.normalize_passage(t, x) for t, x, *_ in real]
    assert s.keys.tolist() == [_store.passage_hash(t, x) for t, x, *_ in real]
    # the digest: the passages' fields as stored, in order (what the fingerprint reads)
    want = hashlib.sha256(b"".join(_store._row_bytes(r) for r in real)).hexdigest()
    assert w.digest == want


def test_documents_in_the_order_asked_with_their_ids_and_contents(tmp_path):
    """A corpus line's own id and contents byte for byte; a dataset paragraph's number and title + newline + text
    (a newline inside its title sent as a space); across blocks, repeated ids, any Unicode, empty fields."""
    rows = [(f"T{i} é\n" if i % 5 == 0 else f"T{i}", "" if i % 17 == 0 else "wörd 🙂 " * (i % 5) + str(i),
             "corpus" if i % 3 == 0 else "dataset", f"d{i}" if i % 3 == 0 else None,
             (f"P{i}:" if i % 4 else "") if i % 3 == 0 else None) for i in range(300)]
    _write(tmp_path, rows, 64)
    s = _Store(tmp_path, len(rows))
    pids = np.random.default_rng(0).integers(0, len(rows), 200).tolist() + [0, 299, 7, 8, 8, 7]
    got = s.documents(np.asarray(pids))
    for pid, (did, contents, title, text) in zip(pids, got, strict=True):
        t, x, _, d, p = rows[pid]
        assert (title, text) == (t, x)
        assert did == (str(pid) if d is None else d)
        assert contents == (t.replace("\n", " ") + "\n" if p is None else p) + x
    assert s.documents([]) == []
    assert [s.origin(p) for p in (0, 1)] == ["corpus", "dataset"]
    with pytest.raises(IndexError, match="passage 300 is not in this index of 300 passages"):
        s.documents([300])


def test_the_answer_test_spans_are_in_on_the_normalised_text(real, tmp_path):
    _write(tmp_path, real, 1000)
    s = _Store(tmp_path, len(real))
    find, starts, ends = s.norm_spans()
    norms = [_store.normalize_passage(t, x) for t, x, *_ in real]
    words = [" the ", " a ", " paris ", " 1 ", " é ", " united states ", " river ", " zzqx "]
    for pid in range(0, len(real), 7):
        for w in words:
            assert (find(w.encode(), starts[pid], ends[pid]) >= 0) == (w in norms[pid])
    assert [w for w in words if any(w in n for n in norms)]  # some of them are there


def test_the_store_is_smaller_than_its_text(real, tmp_path):
    """Real Wikipedia paragraphs: the passages file (with its dictionary and offsets) at most half their fields'
    bytes, and the normalised texts less than half theirs."""
    _write(tmp_path, real, 1 << 16)
    raw = sum(len(_store._row_bytes(r)) for r in real)
    norms = sum(len(_store.normalize_passage(t, x).encode()) for t, x, *_ in real)
    assert (tmp_path / _store.PASSAGES).stat().st_size < 0.5 * raw
    assert (tmp_path / _store.NORMS).stat().st_size < 0.5 * norms


def test_a_damaged_store_file_is_refused(real, tmp_path):
    _write(tmp_path, real[:100], 100)
    path = tmp_path / _store.PASSAGES
    data = bytearray(path.read_bytes())
    data[-_store._FOOTER.size:-_store._FOOTER.size + 8] = b"NOTMAGIC"
    path.write_bytes(bytes(data))
    problems = _store.PassageStore()._open_store(tmp_path, {"passages": 100, "questions": 0, "depth": 0})
    assert problems == ["passages.bin: not a block file of this version"]
    good = _store.BlockReader(tmp_path / _store.NORMS)
    assert (good.rows, good.per, good.blocks) == (100, _store.NORM_ROWS, 1)
