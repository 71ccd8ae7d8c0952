"""GlobalRAG's rewards (Luo et al., ``../shared/papers/globalrag.txt`` section 3.2, appendix E.4), batched.

For a trajectory with plan graph G against the gold plan graph G̃ (the grammar of this folder):

* **R_str** (Eq. 1) ``= exp(-GED(G, G̃) / (N_G̃ + E_G̃))``: networkx's exact ``graph_edit_distance`` on the
  directed dependency graphs, unit costs, nodes unlabelled (structure only);
* **R_sem** (Eq. 2) ``= (1/|P_gold|) Σ_matched cos(e(pred_i), e(gold_i))``: E5 embeddings of the sub-questions of
  the node pairs matched by the maximum common subgraph (below); unmatched gold nodes count 0;
* **R_step** (Eq. 3) ``= (1/|P_gold|) Σ_matched F1(sub-answer_i, gold sub-answer_i)``: the HotpotQA token F1 of the
  ``#k = answer`` bound to the matched predicted node; a missing sub-answer counts 0. ``|P_gold|`` counts the gold
  nodes whose sub-answer is known (HotpotQA comparison plans have none: R_step is 0 there, for every rollout);
* **R_answ** (Eq. 4): exact match of the final ``<answer>`` (SQuAD normalisation, best over the aliases);
* **R_form** (Eq. 5): 1 when :func:`~rag_curriculum.methods.globalrag.parse_globalrag` finds no format error;
* **R(t)** (Eq. 7) ``= w_t (α R_form + λ R_str + γ R_sem + δ R_step) + R_answ`` with (Eq. 6 / 15)
  ``w_t = 1 / (1 + exp((t - 0.9 T) / 10))``, t the trainer's global step (TRL's ``trainer_state.global_step``),
  T = 50 (appendix E.4), α = 0.1, λ = γ = δ = 0.5.

**The matching rule** (the paper: "a depth-first search (DFS) algorithm to identify the maximum common
subgraph"; it leaves the criterion open). A matching is an injective map from gold nodes to predicted nodes
that preserves the dependency edges both ways between matched nodes (a common *induced* subgraph of the two
directed graphs, not necessarily connected); a DFS over the gold nodes in plan order finds every matching of
maximum size. Among those, ``tie_break="similarity"`` (default) takes the one with the largest sum of cosine
similarities (two independent sub-questions listed in the other order are matched by meaning),
``tie_break="order"`` the first found (predicted candidates in plan order). R_sem and R_step use the same
matching. A trajectory without a valid plan (none, not JSON, cyclic...) scores 0 on R_str, R_sem and R_step.

**Cost.** The graph edit distance and the matchings depend on the two structures only, so they are computed
once per distinct (predicted structure, gold structure) pair (LRU caches: a batch of rollouts shares a handful
of plan shapes), and the sub-questions of a whole batch are embedded in one call, each distinct text once
(and kept in an LRU cache across calls). ``bench/bench_globalrag.py`` compares this with a per-trajectory
implementation.

**Embedders.** ``embedder`` is a sentence-transformers model (a Hub name or a local directory; default
``intfloat/e5-base``, the paper's "E5-base", with E5's ``"query: "`` prefix; the ``globalrag`` extra installs
sentence-transformers), ``"hash"`` (a deterministic hashed bag of words, no model: for CPU smoke runs, not E5),
a ``"module:attr"`` factory, or any callable ``texts -> array (n, d)``. Vectors are L2-normalised before the
cosine.

>>> anneal_weight(45), round(anneal_weight(0), 3), round(anneal_weight(100), 4)
(0.5, 0.989, 0.0041)
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._metrics import answer_f1, answer_scores
from ..._plumbing import AsDict, hash64
from ...errors import ConfigError, RewardInputError
from ...rewards import batch_answers, check_columns, completion_texts, log_means, trajectory_column
from ._grammar import GlobalRagTrace, Plan, PlanError, parse_globalrag, read_plans

__all__ = ["GlobalRagBreakdown", "GlobalRagReward", "anneal_weight", "graph_edit_distance", "max_common_matchings",
           "structural_reward"]

SCHEDULES = ("sigmoid", "constant")
TIE_BREAKS = ("similarity", "order")


def anneal_weight(step: float, T: float = 50.0, *, midpoint_ratio: float = 0.9, temperature: float = 10.0,
                  schedule: str = "sigmoid") -> float:
    """The process rewards' weight at training step ``step``: ``1 / (1 + exp((step - midpoint_ratio T) /
    temperature))`` (Eq. 6; the paper's midpoint 0.9 T and temperature 10), or 1.0 with ``schedule="constant"``
    (the paper's "w/o w_t" ablation)."""
    if schedule == "constant":
        return 1.0
    if schedule != "sigmoid":
        raise ConfigError(f"schedule={schedule!r}; choose one of {', '.join(SCHEDULES)}")
    z = (float(step) - midpoint_ratio * T) / temperature
    if z > 700:
        return 0.0
    return 1.0 / (1.0 + math.exp(z))


# -- structure ----------------------------------------------------------------------------------------------------
Key = tuple[int, tuple[tuple[int, int], ...]]


def _graph(key: Key) -> Any:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(key[0]))
    g.add_edges_from(key[1])
    return g


@functools.lru_cache(maxsize=65536)
def _ged_cached(pred: Key, gold: Key, timeout: float | None) -> float:
    return _ged(pred, gold, timeout)


def _identity_cost(pred: Key, gold: Key) -> int:
    """The cost of one edit path: node i kept as node i, the nodes beyond the smaller graph inserted or deleted,
    the edges that differ inserted or deleted. An upper bound of the graph edit distance."""
    return abs(pred[0] - gold[0]) + len(set(pred[1]) ^ set(gold[1]))


#: Plans up to this many nodes take the exact permutation path (7! = 5,040 node maps, about 10 ms); larger ones
#: take networkx's search.
EXACT_MAX_NODES = 7


@functools.cache
def _permutations(n: int) -> Any:
    import itertools

    import numpy as np

    return np.array(list(itertools.permutations(range(n))), dtype=np.intp).reshape(-1, n)


def _adjacency(key: Key, n: int) -> Any:
    import numpy as np

    a = np.zeros((n, n), dtype=bool)
    for i, j in key[1]:
        a[i, j] = True
    return a


def _ged_small(pred: Key, gold: Key) -> int:
    """The exact graph edit distance of two small directed graphs with unit costs and unlabelled nodes (networkx's
    ``graph_edit_distance`` with its default costs), by every node map at once.

    With node substitution free, an optimal edit path deletes or inserts only the |Δnodes| nodes it must (mapping
    a deleted node u onto an inserted node v instead saves 2 and costs at most the edges it no longer deletes and
    inserts), so the distance is |Δnodes| + the fewest edge mismatches over the bijections between the two node
    sets, the smaller graph padded with isolated nodes: ``min over π of |E_pred Δ π(E_gold)|``. Checked against
    networkx on random graphs (tests/rewards/test_globalrag.py)."""
    n = max(pred[0], gold[0])
    a, b = _adjacency(pred, n), _adjacency(gold, n)
    perms = _permutations(n)
    mapped = b[perms[:, :, None], perms[:, None, :]]  # (n!, n, n): gold's adjacency under every node map
    return abs(pred[0] - gold[0]) + int((mapped != a).sum(axis=(1, 2)).min())


def _ged(pred: Key, gold: Key, timeout: float | None) -> float:
    """The exact graph edit distance (unit costs). When one edit path (node i kept as node i) costs no more than
    |Δnodes| + |Δedges| (a lower bound: every edit changes one count by at most 1), it is the distance, and no
    search is needed (networkx took a second to confirm 0 between two 4-node chains); plans of up to
    :data:`EXACT_MAX_NODES` nodes take :func:`_ged_small`; larger ones networkx's search, bounded by that edit
    path's cost (the bound only prunes paths that cost more: the distance is the same, found up to 200x sooner on
    5-node plans)."""
    bound = _identity_cost(pred, gold)
    if bound <= abs(pred[0] - gold[0]) + abs(len(pred[1]) - len(gold[1])):
        return float(bound)
    if max(pred[0], gold[0]) <= EXACT_MAX_NODES:
        return float(_ged_small(pred, gold))
    import networkx as nx

    d = nx.graph_edit_distance(_graph(pred), _graph(gold), upper_bound=bound, timeout=timeout)
    if d is None:  # pragma: no cover - only with a timeout too short for any path
        d = bound
    return float(d)


def graph_edit_distance(pred: Plan, gold: Plan, *, timeout: float | None = None) -> float:
    """networkx's graph edit distance between two plans' dependency graphs (unit costs, structure only)."""
    return _ged_cached(pred.key, gold.key, timeout)


def structural_reward(pred: Plan | None, gold: Plan, *, timeout: float | None = None) -> float:
    """R_str = exp(-GED / (N_gold + E_gold)); 0.0 without a predicted plan."""
    if pred is None:
        return 0.0
    n, e = gold.key[0], len(gold.key[1])
    return math.exp(-graph_edit_distance(pred, gold, timeout=timeout) / (n + e))


def _matchings(pred: Key, gold: Key) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every maximum common induced subgraph matching, as ``((gold node, pred node), ...)``, in DFS order."""
    np_, ng = pred[0], gold[0]
    pe, ge = set(pred[1]), set(gold[1])
    best: list[tuple[tuple[int, int], ...]] = []
    size = [0]
    used = [False] * np_
    cur: list[tuple[int, int]] = []

    def consistent(g: int, p: int) -> bool:
        for g2, p2 in cur:
            if ((g2, g) in ge) != ((p2, p) in pe) or ((g, g2) in ge) != ((p, p2) in pe):
                return False
        return True

    def dfs(g: int) -> None:
        if len(cur) + (ng - g) < size[0] or len(cur) + min(ng - g, np_ - len(cur)) < size[0]:
            return
        if g == ng:
            if len(cur) > size[0]:
                size[0] = len(cur)
                best.clear()
            if len(cur) == size[0]:
                best.append(tuple(cur))
            return
        for p in range(np_):
            if not used[p] and consistent(g, p):
                used[p] = True
                cur.append((g, p))
                dfs(g + 1)
                cur.pop()
                used[p] = False
        dfs(g + 1)  # gold node g left unmatched

    dfs(0)
    return tuple(best) if size[0] > 0 else ((),)


_matchings_cached = functools.lru_cache(maxsize=65536)(_matchings)


def max_common_matchings(pred: Plan, gold: Plan) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The maximum common (induced, directed) subgraph matchings of two plans: ``((gold i, pred j), ...)`` each,
    in DFS order (see the module docstring)."""
    return _matchings_cached(pred.key, gold.key)


# -- embedders ------------------------------------------------------------------------------------------------
class HashEmbedder:
    """A deterministic hashed bag of lower-cased words (dimension ``dim``): no model, no download. For CPU smoke
    runs and tests of the plumbing; it is not E5."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def __call__(self, texts: Sequence[str]) -> Any:
        import re

        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, hash64(w, byteorder="little") % self.dim] += 1.0
        return out


class SentenceTransformerEmbedder:
    """A sentence-transformers model (a Hub name or a local directory) with an optional text prefix (E5:
    ``"query: "``); loaded on first use, once per process."""

    _models: ClassVar[dict[tuple[str, str | None], Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, model: str, *, prefix: str = "query: ", device: str | None = None,
                 batch_size: int = 64) -> None:
        self.model, self.prefix, self.device, self.batch_size = model, prefix, device, batch_size

    def _load(self) -> Any:
        key = (self.model, self.device)
        with self._lock:
            if key not in self._models:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise ConfigError("the GlobalRAG semantic reward needs sentence-transformers",
                                      hint="pip install 'rag-curriculum[globalrag]', or embedder=hash for a "
                                           "model-free smoke run") from None
                self._models[key] = SentenceTransformer(self.model, device=self.device)
            return self._models[key]

    def __call__(self, texts: Sequence[str]) -> Any:
        model = self._load()
        return model.encode([self.prefix + t for t in texts], batch_size=self.batch_size,
                            convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)


def make_embedder(spec: Any, *, prefix: str = "query: ", device: str | None = None, batch_size: int = 64
                  ) -> Callable[[Sequence[str]], Any]:
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"embedder={spec!r}: a sentence-transformers model, 'hash', 'module:attr' or a callable")
    if spec == "hash":
        return HashEmbedder()
    if ":" in spec and not spec.startswith(("/", ".")) and "/" not in spec.split(":", 1)[0]:
        import importlib

        mod, attr = spec.split(":", 1)
        try:
            factory = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"embedder={spec!r}: {e}", hint="check the module:attr path") from None
        return factory()
    return SentenceTransformerEmbedder(spec, prefix=prefix, device=device, batch_size=batch_size)


class _VectorCache:
    """Embeds distinct texts once (one call per batch for the new ones), L2-normalised, LRU-bounded."""

    def __init__(self, embed: Callable[[Sequence[str]], Any], size: int = 100_000) -> None:
        self.embed, self.size = embed, size
        self.store: OrderedDict[str, Any] = OrderedDict()

    def get(self, texts: Sequence[str]) -> dict[str, Any]:
        import numpy as np

        new = [t for t in dict.fromkeys(texts) if t not in self.store]
        if new:
            vecs = np.asarray(self.embed(new), dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape[0] != len(new):
                raise ConfigError(f"the embedder returned shape {vecs.shape} for {len(new)} texts")
            vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            for t, v in zip(new, vecs, strict=True):
                self.store[t] = v
        out = {}
        for t in texts:
            self.store.move_to_end(t)
            out[t] = self.store[t]
        while len(self.store) > self.size:
            self.store.popitem(last=False)
        return out


# -- the reward ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GlobalRagBreakdown(AsDict):
    """One trajectory's terms, the weight w_t of its step and the total R(t); ``matched``: gold nodes matched;
    ``gold_nodes``: |P_gold|; ``has_gold``: whether a gold plan was found for its row."""

    form: float
    structure: float
    semantic: float
    step: float
    answer: float
    weight: float
    total: float
    matched: int
    gold_nodes: int
    has_gold: bool


_LOGGED = ("form", "structure", "semantic", "step", "answer", "weight", "total")


@dataclass(frozen=True)
class GlobalRagReward:
    """GlobalRAG's total reward R(t) as a batched TRL reward function (see the module docstring).

    Gold plans come from a ``gold_plan`` column (a plan dict per row: ``nodes``, ``edges``) or from ``plans``, a
    plan file (``curriculum globalrag plans``) looked up by the row's ``source_id`` (the
    example's id; ``id`` when absent). A row without a gold plan is an error unless ``missing_plan="zero"`` (its
    plan terms are then 0 and counted in ``globalrag/no_gold_plan``)."""

    alpha: float = 0.1  # format
    lam: float = 0.5  # structure (λ)
    gamma: float = 0.5  # semantics (γ)
    delta: float = 0.5  # sub-answers (δ)
    T: float = 50.0  # appendix E.4
    midpoint_ratio: float = 0.9
    temperature: float = 10.0
    schedule: str = "sigmoid"
    plans: str | None = None
    missing_plan: str = "error"  # error | zero
    embedder: Any = "intfloat/e5-base"
    prefix: str = "query: "
    device: str | None = None
    batch_size: int = 64
    tie_break: str = "similarity"
    ged_timeout: float | None = None
    require_search: bool = True
    require_all_subanswers: bool = True
    strict_end: bool = True
    log_components: bool = True

    __name__: ClassVar[str] = "globalrag"
    component: ClassVar[str] = "total"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule={self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break={self.tie_break!r}; choose one of {', '.join(TIE_BREAKS)}")
        if self.missing_plan not in ("error", "zero"):
            raise ConfigError(f"missing_plan={self.missing_plan!r}; choose error or zero")
        for name in ("alpha", "lam", "gamma", "delta", "T", "midpoint_ratio", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (name == "temperature" and value == 0):
                raise ConfigError(f"GlobalRAG {name} must be a finite number {'> 0' if name == 'temperature' else '>= 0'}"
                                  f", got {value!r}", hint="alpha, lam, gamma and delta weigh Eq. 7's terms (0 "
                                  "switches one off); T, midpoint_ratio and temperature set Eq. 6's annealing")
        if self.ged_timeout is not None and (isinstance(self.ged_timeout, bool)
                                             or not isinstance(self.ged_timeout, (int, float))
                                             or not math.isfinite(self.ged_timeout) or self.ged_timeout <= 0):
            raise ConfigError(f"GlobalRAG ged_timeout must be a number of seconds > 0 or null, got "
                              f"{self.ged_timeout!r}", hint="null: no limit on the graph edit distance's search")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"GlobalRAG batch_size must be an integer >= 1, got {self.batch_size!r}",
                              hint="the embedder's batch (texts per call), 64 by default")

    # lazily built, per process (the instance stays picklable: nothing heavy is held until first use)
    def _state(self) -> dict[str, Any]:
        st = _STATE.get(id(self))
        if st is None or st["owner"] is not self:
            st = {"owner": self, "plans": read_plans(self.plans) if self.plans else {},
                  "vectors": None}
            _STATE[id(self)] = st
        return st

    def _vectors(self) -> _VectorCache:
        st = self._state()
        if st["vectors"] is None:
            st["vectors"] = _VectorCache(make_embedder(self.embedder, prefix=self.prefix, device=self.device,
                                                       batch_size=self.batch_size))
        return st["vectors"]

    def weight(self, step: float) -> float:
        return anneal_weight(step, self.T, midpoint_ratio=self.midpoint_ratio, temperature=self.temperature,
                             schedule=self.schedule)

    def _gold(self, i: int, gold_plan: Sequence[Any] | None, source_id: Sequence[Any] | None,
              ids: Sequence[Any] | None) -> Plan | None:
        if gold_plan is not None and gold_plan[i] is not None:
            g = gold_plan[i]
            if isinstance(g, Plan):
                return g
            where = f"completion {i} of the batch"
            if not isinstance(g, Mapping):
                raise RewardInputError(f"gold_plan is {_show(g)} ({type(g).__name__}), not a plan (a dict with "
                                       "'nodes')", kind="wrong_type", record=where, field="gold_plan",
                                       hint="a gold plan is {nodes: [{question, placeholder, answer}], edges}: "
                                            "curriculum globalrag plans writes them")
            try:
                return _plan_of(json.dumps(_plain(g), sort_keys=True, default=str))
            except PlanError as e:
                raise RewardInputError(f"gold_plan is not a valid plan: {e}", kind=e.kind, record=where,
                                       field="gold_plan") from None
        table = self._state()["plans"]
        for col in (source_id, ids):
            if col is not None and col[i] is not None and str(col[i]) in table:
                return table[str(col[i])]
        if self.missing_plan == "zero":
            return None
        which = next((f"{n} {c[i]!r}" for n, c in (("source_id", source_id), ("id", ids)) if c is not None), "")
        raise ConfigError(f"no gold plan for completion {i} ({which or 'no id column'})",
                          hint="pass a gold_plan column or plans=FILE holding every training row's id "
                               "(curriculum globalrag plans), or missing_plan=zero")

    def components(self, completions: Sequence[Any], answers: Sequence[Any] | None = None, *,
                   reward_model: Sequence[Any] | None = None, trajectory: Sequence[Any] | None = None,
                   gold_plan: Sequence[Any] | None = None, source_id: Sequence[Any] | None = None,
                   id: Sequence[Any] | None = None, step: float = 0,
                   golden_answers: Sequence[Any] | None = None) -> list[GlobalRagBreakdown]:
        """The terms of every completion of a batch, batched (see "Cost" in the module docstring)."""
        n = check_columns(completions, {"trajectory": trajectory, "gold_plan": gold_plan, "source_id": source_id},
                          who="the GlobalRAG reward")
        texts = completion_texts(completions)
        trajectories = trajectory_column(trajectory, n)
        all_gold = batch_answers(n, answers, reward_model, golden_answers, ids=id, who="the GlobalRAG reward")
        traces: list[GlobalRagTrace] = []
        for c, t in zip(texts, trajectories, strict=True):
            text = "".join(s["text"] for s in t["segments"]) if t is not None and t.get("segments") else c
            traces.append(parse_globalrag(text, require_search=self.require_search,
                                          require_all_subanswers=self.require_all_subanswers,
                                          strict_end=self.strict_end))
        golds = [self._gold(i, gold_plan, source_id, id) for i in range(n)]
        # structure and matchings: once per distinct pair of structures (cached)
        pairs: list[tuple[Any, ...] | None] = []
        need: list[str] = []
        for tr, g in zip(traces, golds, strict=True):
            if tr.plan is None or g is None:
                pairs.append(None)
                continue
            maps = max_common_matchings(tr.plan, g)
            pairs.append(maps)
            for m in maps if self.tie_break == "similarity" else maps[:1]:
                for gi, pj in m:
                    need += [tr.plan.nodes[pj].question, g.nodes[gi].question]
        vec = self._vectors().get(need) if need else {}
        w = self.weight(step)
        out: list[GlobalRagBreakdown] = []
        for i, (tr, g, maps) in enumerate(zip(traces, golds, pairs, strict=True)):
            gold_answers = all_gold[i]
            em = answer_scores(tr.answer, gold_answers)[0] if tr.answer else 0.0
            form = float(tr.valid)
            s_str = s_sem = s_step = 0.0
            matched = 0
            if maps is not None and tr.plan is not None and g is not None:
                s_str = structural_reward(tr.plan, g, timeout=self.ged_timeout)
                best, best_sims = maps[0], None
                for m in maps if self.tie_break == "similarity" else maps[:1]:
                    sims = [float(vec[tr.plan.nodes[pj].question] @ vec[g.nodes[gi].question]) for gi, pj in m]
                    if best_sims is None or sum(sims) > sum(best_sims) + 1e-9:
                        best, best_sims = m, sims
                matched = len(best)
                s_sem = sum(best_sims or []) / len(g.nodes)
                known = [k for k, nd in enumerate(g.nodes) if nd.answer is not None]
                if known:
                    tot = 0.0
                    for gi, pj in best:
                        ans = g.nodes[gi].answer
                        sub = tr.sub_answers.get(tr.plan.nodes[pj].placeholder)
                        if ans is not None and sub:
                            tot += answer_f1(sub, [ans])
                    s_step = tot / len(known)
            process = self.alpha * form + self.lam * s_str + self.gamma * s_sem + self.delta * s_step
            out.append(GlobalRagBreakdown(form, s_str, s_sem, s_step, em, w, w * process + em, matched,
                                          len(g.nodes) if g is not None else 0, g is not None))
        return out

    def __call__(self, completions: Sequence[Any], answers: Sequence[Any] | None = None, *,
                 reward_model: Sequence[Any] | None = None, trajectory: Sequence[Any] | None = None,
                 gold_plan: Sequence[Any] | None = None, source_id: Sequence[Any] | None = None,
                 id: Sequence[Any] | None = None, trainer_state: Any = None,
                 golden_answers: Sequence[Any] | None = None,
                 log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        """TRL reward function: one float per completion; the step t is ``trainer_state.global_step`` (0 without
        a trainer state)."""
        step = float(getattr(trainer_state, "global_step", 0) or 0)
        scores = self.components(completions, answers, reward_model=reward_model, trajectory=trajectory,
                                 gold_plan=gold_plan, source_id=source_id, id=id, step=step,
                                 golden_answers=golden_answers)
        if self.log_components and log_metric is not None and scores:
            log_means(log_metric, "globalrag", scores, _LOGGED)
            log_metric("globalrag/no_gold_plan", sum(not b.has_gold for b in scores) / len(scores))
        return [float(getattr(b, self.component)) for b in scores]


_STATE: dict[int, dict[str, Any]] = {}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> Any:
    """A plan read back with pandas (NumPy arrays for its lists) as plain Python."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    return _plain(tolist()) if callable(tolist) and not isinstance(value, (str, bytes)) else value


@functools.lru_cache(maxsize=65536)
def _plan_of(text: str) -> Plan:
    """A gold plan column's dict (as sorted JSON) as a Plan, built once: a batch repeats each row per rollout."""
    return Plan.from_dict(json.loads(text))


@dataclass(frozen=True)
class GlobalRagFormatReward(GlobalRagReward):
    """R_form alone."""

    log_components: bool = False
    __name__: ClassVar[str] = "globalrag_format"
    component: ClassVar[str] = "form"


@dataclass(frozen=True)
class GlobalRagStructureReward(GlobalRagReward):
    """R_str alone."""

    log_components: bool = False
    __name__: ClassVar[str] = "globalrag_structure"
    component: ClassVar[str] = "structure"


@dataclass(frozen=True)
class GlobalRagSemanticReward(GlobalRagReward):
    """R_sem alone."""

    log_components: bool = False
    __name__: ClassVar[str] = "globalrag_semantic"
    component: ClassVar[str] = "semantic"


@dataclass(frozen=True)
class GlobalRagStepReward(GlobalRagReward):
    """R_step alone."""

    log_components: bool = False
    __name__: ClassVar[str] = "globalrag_step"
    component: ClassVar[str] = "step"


@dataclass(frozen=True)
class GlobalRagAnswerReward(GlobalRagReward):
    """R_answ alone."""

    log_components: bool = False
    __name__: ClassVar[str] = "globalrag_answer"
    component: ClassVar[str] = "answer"
