"""A generator of realistic embedding vectors, fitted to real ones: what bench/bench_dense_calibrate.py checks against
the real vectors and bench/bench_dense_scale.py draws millions from.

The model (:func:`fit`), in the real passages' PCA basis (mean ``mu``, axes ``axes``: the real spectrum):

* **topics**: the real passages are grouped by k-means into topics of ``cluster_size`` passages on average; each
  real topic is a **template**: its passages' offsets from its centre (``offsets``, grouped by ``starts``), so the
  local geometry of real neighbourhoods (their few directions, their spread, their sizes) is kept;
* **a generated topic** is a template placed at a new centre, drawn from a Gaussian with the real centres' mean
  and covariance (``centre_mean``, ``centre_chol``) scaled by ``spread``, each passage its template offset plus fresh Gaussian noise of
  ``jitter`` times the within-topic per-axis spread (``within_std``): no two generated passages are copies;
* **a query** is a real question's offset from its gold paragraph's topic centre (``q_offsets``, ``q_topic``), put
  at a generated copy of that topic, plus the same jitter: the real relation of a question to its neighbourhood;
* every vector mapped back (``mu + coords @ axes``) and normalised, as the encoder's are.

Later knobs, each off by default (a model saved before them loads as the generator it was):

* ``cycle``: templates drawn in seeded shuffled rounds (every template once a round), not independently at random,
  and the queries as the real questions in rounds (each at a copy of its own topic), so a sample of the real size
  has the real topics and the real questions' share of them, whatever the seed;
* ``kde`` (>= 0): a topic's centre is a real topic's centre (its template's own with ``kde_own``) moved by ``kde``
  times the centres' Gaussian, not a draw from that Gaussian: the real topics are cells cut from a continuum (a
  passage's offset points at the neighbouring topics), and a template put at a random centre is an island, its
  neighbourhoods tighter than the real ones;
* ``perm``: a share of a generated topic's axes, each permuted among its passages (a recombination, not a copy);
  ``qperm``: the same for a query's axes among its topic's questions;
* ``q_from`` 1: a query is its question's offset from its gold passage, put at that passage's generated copy;
  ``q_jitter``: the queries' own noise (negative: ``jitter``).

A sample of any size has as many topics per passage as the real one (topics drawn until the passages are made).
Generation is streamed (:func:`passages`: blocks of whole topics, each block seeded by its number); the same seed
makes the same vectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Model:
    mu: np.ndarray  # (d,)
    axes: np.ndarray  # (d, d): rows are the PCA axes
    centre_mean: np.ndarray  # (d,) in PCA coordinates
    centre_chol: np.ndarray  # (d, d): a Cholesky factor of the centres' covariance
    within_std: np.ndarray  # (d,): the within-topic spread per axis
    offsets: np.ndarray  # (n_real, d): each real passage's offset from its topic centre, grouped by topic
    starts: np.ndarray  # (topics + 1,): topic t's offsets are offsets[starts[t]:starts[t + 1]]
    q_offsets: np.ndarray  # (questions, d): each real question's offset from its gold's topic centre
    q_topic: np.ndarray  # (questions,): that topic
    jitter: np.ndarray  # (): the fresh noise, as a share of within_std
    spread: np.ndarray  # (): the centres' spread, as a share of the real centres' (how near topics lie)
    # the knobs added later (a model saved before them loads with these defaults: the generator as it was)
    perm: np.ndarray = np.float32(0)  # (): the share of axes whose offsets are permuted within a generated topic
    qperm: np.ndarray = np.float32(0)  # (): the same for a query's offset, among its topic's questions
    q_jitter: np.ndarray = np.float32(-1)  # (): the queries' noise, share of within_std (negative: ``jitter``)
    q_from: np.ndarray = np.int64(0)  # (): 0: a query at its gold's topic centre; 1: at its gold passage's copy
    q_local: np.ndarray | None = None  # (questions, d): each question's offset from its gold passage
    q_row: np.ndarray | None = None  # (questions,): that passage's row in ``offsets``
    cycle: np.ndarray = np.int64(0)  # (): 1: templates drawn in shuffled rounds (each once a round), not at random
    kde: np.ndarray = np.float32(-1)  # (): >= 0: a topic's centre a real centre plus kde times the centres' Gaussian
    kde_own: np.ndarray = np.int64(0)  # (): with kde, 1: its template's own real centre; 0: another (at random)
    centres: np.ndarray | None = None  # (topics, d): the real topics' centres (for kde)

    @property
    def d(self) -> int:
        return len(self.mu)

    @property
    def topics(self) -> int:
        return len(self.starts) - 1

    def to_vectors(self, z: np.ndarray) -> np.ndarray:
        x = self.mu + z @ self.axes
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def fit(x: np.ndarray, q: np.ndarray, gold: list[list[int]], *, cluster_size: float = 10.0, jitter: float = 0.25,
        spread: float = 1.0, seed: int = 0, perm: float = 0.0, qperm: float = 0.0, q_jitter: float = -1.0,
        q_from: int = 0, cycle: int = 0, kde: float = -1.0, kde_own: int = 0) -> Model:
    """Fit the model to passages ``x`` (unit rows), questions ``q`` and each question's gold passage rows; the
    three knobs (``cluster_size``, ``jitter``, ``spread``) are chosen by bench_dense_calibrate.py."""
    import faiss

    x = np.asarray(x, dtype=np.float32)
    mu = x.mean(0)
    xc = x - mu
    _, _, vt = np.linalg.svd(xc, full_matrices=False)
    axes = vt.astype(np.float32)  # (d, d) for n >= d
    z = xc @ axes.T
    k = max(2, int(round(len(x) / cluster_size)))
    km = faiss.Kmeans(z.shape[1], k, niter=25, seed=seed, min_points_per_centroid=1)
    km.train(np.ascontiguousarray(z))
    _, assign = km.index.search(np.ascontiguousarray(z), 1)
    assign = assign[:, 0]
    used, assign = np.unique(assign, return_inverse=True)  # topics numbered 0.. (k-means may leave some empty)
    centres = np.stack([z[assign == t].mean(0) for t in range(len(used))])
    order = np.argsort(assign, kind="stable")
    offsets = (z - centres[assign])[order]
    starts = np.concatenate([[0], np.cumsum(np.bincount(assign, minlength=len(used)))])
    cov = np.cov(centres, rowvar=False) + 1e-6 * np.eye(z.shape[1])
    chol = np.linalg.cholesky(cov).astype(np.float32)
    zq = (np.asarray(q, dtype=np.float32) - mu) @ axes.T
    keep = [i for i, g in enumerate(gold) if g]
    q_topic = np.array([assign[gold[i][0]] for i in keep])
    q_offsets = zq[keep] - centres[q_topic]
    q_gold = np.array([gold[i][0] for i in keep])
    q_local = zq[keep] - z[q_gold]
    q_row = np.argsort(order)[q_gold]  # the gold passage's row in ``offsets``
    return Model(mu=mu, axes=axes, centre_mean=centres.mean(0).astype(np.float32), centre_chol=chol,
                 within_std=offsets.std(0).astype(np.float32), offsets=offsets.astype(np.float32),
                 starts=starts.astype(np.int64), q_offsets=q_offsets.astype(np.float32), q_topic=q_topic,
                 jitter=np.float32(jitter), spread=np.float32(spread), perm=np.float32(perm),
                 qperm=np.float32(qperm), q_jitter=np.float32(q_jitter), q_from=np.int64(q_from),
                 q_local=q_local.astype(np.float32), q_row=q_row.astype(np.int64), cycle=np.int64(cycle),
                 kde=np.float32(kde), kde_own=np.int64(kde_own), centres=centres.astype(np.float32))


def lift(m: Model, copies: int) -> Model:
    """A model of ``copies`` times the dimension, for sizes no real encoder here has (768: e5-base's): the vector is
    ``copies`` draws of the fitted model side by side, normalised together. All copies of a passage come from the
    same generated topic (one centre drawn for all, block by block from the real centres' covariance), the k-th copy
    of its offset being the offset of the passage k places on in the same real topic (so the copies are not
    repeats); a query repeats its real offset in each copy. The spectrum is the fitted one, each axis ``copies``
    times: a constructed set, not a fit to a real encoder of that size (the docs say so beside each figure)."""
    if copies == 1:
        return m
    import scipy.linalg

    shifted = []
    for c in range(copies):  # offset rows rolled by c within each topic
        rows = np.empty(len(m.offsets), dtype=np.int64)
        for t in range(m.topics):
            a, b = int(m.starts[t]), int(m.starts[t + 1])
            rows[a:b] = a + (np.arange(b - a) + c) % (b - a)
        shifted.append(m.offsets[rows])
    return Model(mu=np.tile(m.mu, copies), axes=scipy.linalg.block_diag(*[m.axes] * copies).astype(np.float32),
                 centre_mean=np.tile(m.centre_mean, copies),
                 centre_chol=scipy.linalg.block_diag(*[m.centre_chol] * copies).astype(np.float32),
                 within_std=np.tile(m.within_std, copies), offsets=np.concatenate(shifted, axis=1),
                 starts=m.starts, q_offsets=np.tile(m.q_offsets, (1, copies)), q_topic=m.q_topic, jitter=m.jitter,
                 spread=m.spread, perm=m.perm, qperm=m.qperm, q_jitter=m.q_jitter, q_from=m.q_from,
                 q_local=None if m.q_local is None else np.tile(m.q_local, (1, copies)), q_row=m.q_row,
                 cycle=m.cycle, kde=m.kde, kde_own=m.kde_own,
                 centres=None if m.centres is None else np.tile(m.centres, (1, copies)))


TOPICS_PER_BLOCK = 4096


def _per_block(m: Model) -> int:
    """Topics a block: 4096 (about 123,000 passages at 30 a topic), fewer for larger templates (a block of about
    131,072 passages), so a block's memory stays bounded whatever the topic size."""
    return int(min(TOPICS_PER_BLOCK, max(1, (1 << 17) // max(1, len(m.offsets) // m.topics))))


def _topics(m: Model, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Block ``b``'s topics: their templates and centres (a stream of their own, so queries need no passages)."""
    rng = np.random.default_rng([seed, b, 0])
    k = _per_block(m)
    tmpl = rng.integers(0, m.topics, k)
    if int(m.cycle):  # topics b*k.. of a sequence of rounds, each round every template once in a seeded order
        first = b * k
        rounds = range(first // m.topics, (first + k - 1) // m.topics + 1)
        seq = np.concatenate([np.random.default_rng([seed, r, 3]).permutation(m.topics) for r in rounds])
        tmpl = seq[first - rounds[0] * m.topics:][:k]
    centres = m.centre_mean + m.spread * (rng.standard_normal((k, m.d), dtype=np.float32) @ m.centre_chol.T)
    if float(m.kde) >= 0:  # the real centres, as a kernel density: each a real topic's centre, moved
        r2 = np.random.default_rng([seed, b, 4])
        at = tmpl if int(m.kde_own) else r2.integers(0, m.topics, k)
        centres = m.centres[at] + float(m.kde) * (r2.standard_normal((k, m.d), dtype=np.float32) @ m.centre_chol.T)
    return tmpl, centres


def _permute(rng: np.random.Generator, z: np.ndarray, share: float) -> np.ndarray:
    """``z`` (the rows of one topic) with a ``share`` of its axes (drawn at random) each permuted among the rows on
    its own: a recombination of the template's offsets, with its per-axis spread, not a copy of any one of them."""
    axes = np.flatnonzero(rng.random(z.shape[1]) < share)
    if len(axes) and len(z) > 1:
        z = z.copy()
        z[:, axes] = rng.permuted(z[:, axes], axis=0)
    return z


def _block(m: Model, b: int, seed: int) -> np.ndarray:
    """Block ``b``'s passages' PCA coordinates: each topic's template offsets at its centre (with ``perm``,
    recombined within the topic), plus the jitter."""
    tmpl, centres = _topics(m, b, seed)
    sizes = m.starts[tmpl + 1] - m.starts[tmpl]
    rows = np.concatenate([np.arange(m.starts[s], m.starts[s + 1]) for s in tmpl])
    owner = np.repeat(np.arange(len(tmpl)), sizes)
    offsets = m.offsets[rows]
    perm = float(m.perm)
    if perm > 0:
        rng = np.random.default_rng([seed, b, 2])
        ends = np.cumsum(sizes)
        for a, e in zip((ends - sizes).tolist(), ends.tolist(), strict=True):
            offsets[a:e] = _permute(rng, offsets[a:e], perm)
    noise = np.random.default_rng([seed, b, 1]).standard_normal((len(rows), m.d), dtype=np.float32)
    return centres[owner] + offsets + noise * (m.jitter * m.within_std)


def passages(m: Model, n: int, *, seed: int = 0) -> Iterator[np.ndarray]:
    """``n`` generated passage vectors (float32, unit rows), a block of whole topics at a time (the last cut)."""
    done, b = 0, 0
    while done < n:
        z = _block(m, b, seed)[:n - done]
        done += len(z)
        b += 1
        yield m.to_vectors(z)


def queries(m: Model, n_queries: int, n: int, *, seed: int = 0) -> np.ndarray:
    """``n_queries`` queries over a sample of ``n`` passages (the same ``seed`` as :func:`passages`): each a real
    question's offset put at a generated copy of its topic (a topic the sample holds whole), plus the jitter. With
    ``q_from`` 1 the offset is the question's from its gold passage, put at that passage's generated copy; with
    ``qperm`` a share of its axes is taken from other questions about the same topic."""
    by_topic: dict[int, list[int]] = {}
    for i, t in enumerate(m.q_topic.tolist()):
        by_topic.setdefault(t, []).append(i)
    sizes = m.starts[1:] - m.starts[:-1]
    hosts = []  # (block, topic in block) of every topic the sample holds whole and a real question is about
    on: dict[int, list] = {}  # template -> its hosts
    done, b = 0, 0
    while done < n:
        tmpl, _ = _topics(m, b, seed)
        ends = done + np.cumsum(sizes[tmpl])
        for j in np.flatnonzero((ends <= n) & np.isin(tmpl, list(by_topic))).tolist():
            hosts.append((b, j))
            on.setdefault(int(tmpl[j]), []).append((b, j))
        done = int(ends[-1])
        b += 1
    rng = np.random.default_rng([seed, 1 << 30])
    if int(m.cycle):  # the real questions in shuffled rounds (each once a round), each at a copy of its topic
        picked = []
        while len(picked) < n_queries and on:
            for qi in rng.permutation(len(m.q_topic)).tolist():
                where = on.get(int(m.q_topic[qi]))
                if where and len(picked) < n_queries:
                    picked.append(where[int(rng.integers(0, len(where)))] + (qi,))
        picked.sort()
    else:
        picked = sorted(hosts[i] for i in rng.choice(len(hosts), size=n_queries, replace=len(hosts) < n_queries))
    q_jitter = float(m.jitter) if float(m.q_jitter) < 0 else float(m.q_jitter)
    local = int(m.q_from) == 1
    qperm = float(m.qperm)
    out, cache = [], {}
    for b, j, *chosen in picked:
        if b not in cache:
            cache = {b: _topics(m, b, seed)}
            if local:
                tmpl_b = cache[b][0]
                cache[b] += (_block(m, b, seed), np.cumsum(sizes[tmpl_b]) - sizes[tmpl_b])
        tmpl, centres = cache[b][:2]
        asked = by_topic[int(tmpl[j])]
        qi = chosen[0] if chosen else asked[int(rng.integers(0, len(asked)))]
        if local:  # the gold passage's generated copy, and the question's offset from it
            z_b, first = cache[b][2:]
            base = z_b[first[j] + int(m.q_row[qi]) - int(m.starts[tmpl[j]])]
            off = m.q_local[asked] if qperm > 0 else None
            own = m.q_local[qi]
        else:
            base = centres[j]
            off = m.q_offsets[asked] if qperm > 0 else None
            own = m.q_offsets[qi]
        if qperm > 0:  # a share of the axes from other questions about the topic
            take = rng.random(m.d) < qperm
            own = np.where(take, off[rng.integers(0, len(asked), m.d), np.arange(m.d)], own)
        noise = rng.standard_normal(m.d, dtype=np.float32) * (q_jitter * m.within_std)
        out.append(base + own + noise)
    z = np.stack(out)
    return m.to_vectors(z[rng.permutation(len(z))])


def sample(m: Model, n: int, n_queries: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` passages (in memory) and ``n_queries`` queries."""
    return np.concatenate(list(passages(m, n, seed=seed))), queries(m, n_queries, n, seed=seed)
