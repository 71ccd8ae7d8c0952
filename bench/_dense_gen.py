"""A generator of realistic embedding vectors, fitted to real ones: what bench/bench_dense_calibrate.py checks against
the real vectors and bench/bench_dense_scale.py draws millions from.

The model (:func:`fit`), in the real passages' PCA basis (mean ``mu``, axes ``axes``, so the spectrum is kept):

* **topics**: k-means of the passages' PCA coordinates into ``n / cluster_size`` clusters; a topic centre is drawn
  from a Gaussian with the centres' per-axis mean and variance (``centre_mean``, ``centre_var``), so a sample of
  any size has as many topics per passage as the real one;
* **passages of a topic**: the centre plus Gaussian noise with the within-topic per-axis variance (``within_var``),
  scaled per topic by a factor drawn from the real topics' spreads (``spreads``); topic sizes drawn from the real
  ones (``sizes``);
* **queries**: a passage drawn as the query's gold; the query is ``c * gold + sqrt(1 - c^2) * r``, with ``c`` drawn
  from the real questions' cosines to their gold paragraphs (``cosines``) and ``r`` a unit direction orthogonal to
  the gold, drawn in the PCA basis from the per-axis mean and variance of the real questions' components
  orthogonal to their gold paragraphs (``offset_mean``, ``offset_var``): the real similarity to the gold, and the
  real direction queries take away from it;
* every vector mapped back (``mu + coords @ axes``) and normalised, as the encoder's are.

Generation is streamed (:func:`passages`: blocks of whole topics, each block seeded by its number) and the same
seed makes the same vectors.
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
    centre_var: np.ndarray  # (d,)
    within_var: np.ndarray  # (d,)
    spreads: np.ndarray  # per real topic: its RMS noise over the pooled one
    sizes: np.ndarray  # per real topic: its passages
    cosines: np.ndarray  # per real (question, gold paragraph) pair
    offset_mean: np.ndarray  # (d,)
    offset_var: np.ndarray  # (d,)

    @property
    def d(self) -> int:
        return len(self.mu)

    def to_vectors(self, z: np.ndarray) -> np.ndarray:
        x = self.mu + z @ self.axes
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def fit(x: np.ndarray, q: np.ndarray, gold: list[list[int]], *, cluster_size: float = 10.0, seed: int = 0) -> Model:
    """Fit the model to passages ``x`` (unit rows), questions ``q`` and each question's gold passage rows."""
    import faiss

    x = np.asarray(x, dtype=np.float32)
    mu = x.mean(0)
    xc = x - mu
    _, _, vt = np.linalg.svd(xc, full_matrices=False)
    axes = vt.astype(np.float32)  # (d, d) for n >= d
    z = xc @ axes.T
    k = max(2, int(round(len(x) / cluster_size)))
    km = faiss.Kmeans(z.shape[1], k, niter=25, seed=seed, spherical=False, min_points_per_centroid=1)
    km.train(np.ascontiguousarray(z))
    _, assign = km.index.search(np.ascontiguousarray(z), 1)
    assign = assign[:, 0]
    centres = km.centroids
    resid = z - centres[assign]
    within_var = resid.var(0)
    used = np.unique(assign)
    sizes = np.bincount(assign, minlength=k)[used]
    pooled = float(within_var.sum())
    spreads = np.array([np.sqrt((resid[assign == j] ** 2).sum(1).mean() / pooled) for j in used])
    # singleton topics have no spread of their own: draw theirs from the others'
    spreads = np.where(sizes > 1, spreads, np.median(spreads[sizes > 1]))
    pairs = [(i, j) for i, g in enumerate(gold) for j in g]
    qi = np.asarray(q, dtype=np.float32)[[i for i, _ in pairs]]
    gx = x[[j for _, j in pairs]]
    cos = (qi * gx).sum(1)
    orth = qi - cos[:, None] * gx  # the query's part away from its gold
    orth /= np.linalg.norm(orth, axis=1, keepdims=True)
    zo = orth @ axes.T
    return Model(mu=mu, axes=axes, centre_mean=centres[used].mean(0), centre_var=centres[used].var(0),
                 within_var=within_var, spreads=spreads, sizes=sizes, cosines=cos.astype(np.float32),
                 offset_mean=zo.mean(0), offset_var=zo.var(0))


TOPICS_PER_BLOCK = 4096


def _topic_block(m: Model, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Block ``b``'s topics: (sizes, PCA coordinates of its passages)."""
    rng = np.random.default_rng([seed, b])
    t = TOPICS_PER_BLOCK
    sizes = m.sizes[rng.integers(0, len(m.sizes), t)]
    spread = m.spreads[rng.integers(0, len(m.spreads), t)]
    centres = m.centre_mean + np.sqrt(m.centre_var) * rng.standard_normal((t, m.d), dtype=np.float32)
    owner = np.repeat(np.arange(t), sizes)
    noise = rng.standard_normal((len(owner), m.d), dtype=np.float32) * np.sqrt(m.within_var)
    return sizes, centres[owner] + spread[owner, None].astype(np.float32) * noise


def passages(m: Model, n: int, *, seed: int = 0) -> Iterator[np.ndarray]:
    """``n`` generated passage vectors (float32, unit rows), a block of whole topics at a time (the last cut)."""
    done, b = 0, 0
    while done < n:
        _, z = _topic_block(m, b, seed)
        z = z[:n - done]
        done += len(z)
        b += 1
        yield m.to_vectors(z)


def queries(m: Model, gold_vectors: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """A query for each given generated passage (its gold): ``c * gold + sqrt(1 - c^2) * r`` (see the module)."""
    rng = np.random.default_rng([seed, 1 << 30])
    g = np.asarray(gold_vectors, dtype=np.float32)
    c = m.cosines[rng.integers(0, len(m.cosines), len(g))][:, None]
    r = (m.offset_mean + np.sqrt(m.offset_var) * rng.standard_normal((len(g), m.d), dtype=np.float32)) @ m.axes
    r -= (r * g).sum(1, keepdims=True) * g
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    q = c * g + np.sqrt(np.clip(1 - c * c, 0, None)) * r
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def sample(m: Model, n: int, n_queries: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` passages (in memory), ``n_queries`` queries, and each query's gold row."""
    x = np.concatenate(list(passages(m, n, seed=seed)))
    rows = np.sort(np.random.default_rng([seed, 7]).choice(n, size=n_queries, replace=False))
    return x, queries(m, x[rows], seed=seed), rows
