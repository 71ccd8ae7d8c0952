"""CRAFT's faithfulness judge (Algorithm 1): an LLM audits a trace with four binary checks, through any of the
toolkit's generation backends, in batches, with every verdict cached on disk.

The checks, each applied only when the trace has the fields it reads (Eq. 7: ``m_v`` depends on the variant):

=================  =============================  ====================================================  ==========
key                Algorithm 1                    passes when                                           variants
=================  =============================  ====================================================  ==========
``plan_reason``    A: Plan -> Reason              ``<reason>`` follows the sub-questions of ``<plan>``  v1, v3
``citations``      B: Gold_docs -> Reason         R within E and R not empty (R: numbers cited in       v1, v2
                                                  ``<reason>``, E: ``<gold_docs>``)
``reason_answer``  C: Reason -> Answer            ``<answer>`` is the conclusion of ``<reason>``        v1-v4
``grounding``      D: Evidence -> Reason          every claim citing a document is supported by it      v1-v4
=================  =============================  ====================================================  ==========

Check B is a set predicate; ``citation_check="rule"`` computes it exactly from the parse instead of asking the
judge (the paper's judge computes it, and in its own case study 2 passes a trace that cites document 2 outside
its ``<gold_docs>`` [8, 4]). The score is the mean of the checks (``aggregate="mean"``, Eqs. 6-7) or 1 only when
all pass (``aggregate="all"``: the "Overall" of the paper's case studies and, by its numbers, of its
Faithfulness column).

The judge prompt is a template file shipped with the package (``methods/craft/templates/craft_judge.txt``, ``$question``,
``$documents``, ``$trace``, ``$checks``, ``$labels``, ``$example``; ``prompt=PATH`` replaces it). The paper does
not print its judge prompt: this one is the toolkit's. A verdict is the judge's JSON reply; a reply that is not a
JSON object with a 0 / 1 for every check asked counts as every check failed (``error`` says why).

Verdicts are cached in ``cache_dir`` (one JSON file per verdict, written atomically), keyed by the SHA-256 of the
rendered judge prompt (question, documents, trace and the prompt template itself), the judge's identity (backend,
model, options that can change its output) and its sampling; a second audit of the same trace never calls the
backend. ``cache_dir=None`` keeps verdicts in memory only.

>>> from rag_curriculum.generation._scripted import ScriptedBackend
>>> judge = CraftJudge(backend=ScriptedBackend(script=lambda m, n, s: ['{"reason_answer": 1, "grounding": 0}'] * n),
...                    cache_dir=None)
>>> v = judge.audit([("Q?", [("1", "T", "text")], "<reason>doc [1] says</reason><answer>x</answer>", "craft-v4")])[0]
>>> v.checks, v.score, judge.aggregate_score(v.checks)
({'reason_answer': 1, 'grounding': 0}, 0.5, 0.5)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..._plumbing import atomic_write_text
from ...errors import ConfigError
from ...generation import BACKENDS, SamplingConfig, backend_identity, get_backend
from ._format import CRAFT_VARIANTS, parse_craft

__all__ = ["CHECKS", "DEFAULT_PROMPT", "CraftJudge", "Verdict", "checks_for"]

log = logging.getLogger(__name__)

#: Check key -> (Algorithm 1 letter and name, the question put to the judge, the failure label).
CHECKS: dict[str, tuple[str, str, str]] = {
    "plan_reason": ("A: Plan -> Reason", "Does <reason> follow the sub-questions of <plan>, addressing the plan's "
                    "intent in order?", "plan.ignored"),
    "citations": ("B: Gold_docs -> Reason", "Are all documents cited in <reason> among those declared in "
                  "<gold_docs>, and does <reason> cite at least one document?", "doc_outside_gold_docs"),
    "reason_answer": ("C: Reason -> Answer", "Is <answer> the logical conclusion of <reason>, supported by its "
                      "reasoning chain?", "answer.not_supported"),
    "grounding": ("D: Evidence -> Reason", "Is every claim in <reason> that cites a document supported by that "
                  "document's text? (0 if any claim is unsupported: a hallucination)", "evidence_not_supported"),
}
AGGREGATES = ("mean", "all")
CITATION_CHECKS = ("judge", "rule")
DEFAULT_PROMPT = Path(__file__).with_name("templates") / "craft_judge.txt"
_JSON_RE = re.compile(r"\{.*\}", re.DOTALL)


def check_cache_dir(cache_dir: Any) -> None:
    """A judge's ``cache_dir``: None (verdicts in memory), or a folder that is there or can be made (no file on
    the way); refused at construction, not at the first verdict stored."""
    if cache_dir is None:
        return
    if not isinstance(cache_dir, (str, Path)) or not str(cache_dir).strip():
        raise ConfigError(f"judge cache_dir must be a folder path or null, got {cache_dir!r}",
                          hint="cache_dir=null keeps the verdicts in memory only")
    path = Path(cache_dir).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                which = "is" if p == path else f"is inside {p}, which is"
                raise ConfigError(f"judge cache_dir {cache_dir} {which} a file, not a folder",
                                  hint="give a folder (made if missing) for the verdict cache, or cache_dir=null to "
                                       "keep the verdicts in memory only")
            return


def checks_for(tags: Sequence[str]) -> tuple[str, ...]:
    """The checks that apply to a trace with these tags (none without ``<reason>``: v5 has no trace to audit).

    >>> checks_for(("plan", "gold_docs", "reason", "answer")), checks_for(("reason", "answer")), checks_for(("answer",))
    (('plan_reason', 'citations', 'reason_answer', 'grounding'), ('reason_answer', 'grounding'), ())
    """
    if "reason" not in tags:
        return ()
    out = []
    if "plan" in tags:
        out.append("plan_reason")
    if "gold_docs" in tags:
        out.append("citations")
    return (*out, "reason_answer", "grounding")


class Verdict(NamedTuple):
    """One audit: the checks (key -> 0 or 1), their aggregate, the failure labels, whether it came from the cache,
    and why the judge's reply could not be read (None when it could)."""

    checks: dict[str, int]
    score: float
    failures: tuple[str, ...]
    cached: bool
    error: str | None = None


#: One trace to audit: (question, passages as (label, title, text), completion text, CRAFT variant).
Item = tuple[str, Sequence[tuple[str, str, str]], str, str]


@dataclass
class CraftJudge:
    """Algorithm 1 through a generation backend (see the module docstring).

    ``backend`` is a registered backend name (``openai`` for a server such as Qwen3-Max's API or ``vllm serve``,
    ``transformers`` / ``vllm`` for a local model, ``scripted``) built with ``model`` and ``backend_args`` on first
    use, or a backend object. Picklable while the backend is a name (it is rebuilt in each process).
    """

    backend: Any = "openai"
    model: str | None = None
    backend_args: dict[str, Any] = field(default_factory=dict)
    aggregate: str = "mean"
    citation_check: str = "judge"
    cache_dir: str | None = "outputs/judge-cache"
    prompt: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"judge aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}",
                              hint="mean: Eq. 7's average of the checks; all: 1 only when every check passes")
        if self.citation_check not in CITATION_CHECKS:
            raise ConfigError(f"judge citation_check must be judge or rule, got {self.citation_check!r}")
        if isinstance(self.backend, str):
            BACKENDS.get(self.backend)  # an unknown name fails now, with a "did you mean"
            if self.model is None and self.backend != "scripted":
                raise ConfigError(f"the judge's {self.backend} backend needs a model (e.g. model=Qwen3-Max, the "
                                  "paper's judge)", hint="set judge.model (judge_model on the command line)")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"judge max_tokens must be an integer >= 1, got {self.max_tokens!r}",
                              hint="the tokens a judge's reply may take (CRAFT: 256, VERITAS: 16)")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(f"judge temperature must be a finite number >= 0, got {self.temperature!r}",
                              hint="0 decodes greedily (the default); sample with votes > 1 at a temperature > 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"judge seed must be an integer, got {self.seed!r}", hint="seed=0 by default")
        check_cache_dir(self.cache_dir)
        path = Path(self.prompt) if self.prompt else DEFAULT_PROMPT
        try:
            self._template = string.Template(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read the judge prompt {path}: {e.strerror}",
                              hint="give prompt=PATH to a text file with $question, $documents, $trace and $checks"
                              ) from None
        self._memory: dict[str, str] = {}
        self._built: Any = None
        self.calls = 0  # prompts sent to the backend (cache misses), for logs and tests

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_built"] = None  # the backend is rebuilt where the judge is unpickled
        return state

    # -- prompt ---------------------------------------------------------------------------------------------------
    def messages(self, question: str, passages: Sequence[tuple[str, str, str]], completion: str,
                 variant: str) -> list[dict[str, str]]:
        """The judge prompt for one trace (one user message)."""
        keys = self.asked(CRAFT_VARIANTS[variant])
        docs = "\n\n".join(f"[{label}] {title}\n{text}" for label, title, text in passages)
        checks = "\n".join(f"- {k} ({CHECKS[k][0]}): {CHECKS[k][1]}" for k in keys)
        example = json.dumps({**dict.fromkeys(keys, 1), "failures": []})
        text = self._template.safe_substitute(
            question=question, documents=docs, trace=completion.strip(), checks=checks,
            labels=", ".join(CHECKS[k][2] for k in keys), example=example)
        return [{"role": "user", "content": text}]

    def asked(self, tags: Sequence[str]) -> tuple[str, ...]:
        """The checks put to the judge for a trace with these tags (B is computed by rule with
        ``citation_check="rule"``)."""
        keys = checks_for(tags)
        return tuple(k for k in keys if not (k == "citations" and self.citation_check == "rule"))

    # -- backend and cache ----------------------------------------------------------------------------------------
    def _backend(self) -> Any:
        if self._built is None:
            if isinstance(self.backend, str):
                kwargs = dict(self.backend_args)
                if self.model is not None:
                    kwargs["model"] = self.model
                self._built = get_backend(self.backend, **kwargs)
            else:
                self._built = self.backend
        return self._built

    def identity(self) -> dict[str, Any]:
        """What the judge's verdicts depend on besides the prompt: backend, model, options, sampling."""
        if isinstance(self.backend, str):
            ident: Any = backend_identity(self.backend, self.model, self.backend_args)
        else:
            describe = getattr(self.backend, "describe", None)
            ident = describe() if callable(describe) else {"backend": type(self.backend).__name__}
        return {"judge": ident, "sampling": {"temperature": self.temperature, "max_tokens": self.max_tokens,
                                             "seed": self.seed}}

    def key(self, messages: list[dict[str, str]]) -> str:
        payload = json.dumps({"messages": messages, **self.identity()}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return Path(self.cache_dir) / key[:2] / f"{key}.json" if self.cache_dir else None

    def _lookup(self, key: str) -> str | None:
        if key in self._memory:
            return self._memory[key]
        path = self._cache_path(key)
        if path is not None and path.is_file():
            try:
                reply = json.loads(path.read_text(encoding="utf-8"))["reply"]
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("judge cache: ignoring the unreadable entry %s", path)
                return None
            self._memory[key] = reply
            return reply
        return None

    def _store(self, key: str, reply: str, messages: list[dict[str, str]]) -> None:
        self._memory[key] = reply
        path = self._cache_path(key)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"key": key, "reply": reply, **self.identity(),
                                                "prompt_sha256": hashlib.sha256(
                                                    messages[-1]["content"].encode()).hexdigest()},
                                               sort_keys=True, default=str))

    # -- audits ---------------------------------------------------------------------------------------------------
    def aggregate_score(self, checks: Mapping[str, int]) -> float:
        """Eq. 7's mean of the checks, or 1.0 only when all pass (``aggregate="all"``); 0 with no check."""
        if not checks:
            return 0.0
        if self.aggregate == "all":
            return 1.0 if all(checks.values()) else 0.0
        return sum(checks.values()) / len(checks)

    def audit(self, items: Sequence[Item]) -> list[Verdict]:
        """Audit every trace (one batched backend call for the prompts not in the cache, each distinct prompt
        once)."""
        prompts = [self.messages(*item) for item in items]
        keys = [self.key(m) for m in prompts]
        replies: dict[str, str] = {}
        hits: set[str] = set()
        todo: dict[str, list[dict[str, str]]] = {}
        for k, m in zip(keys, prompts, strict=True):
            if k in replies or k in todo:
                continue
            cached = self._lookup(k)
            if cached is None:
                todo[k] = m
            else:
                replies[k] = cached
                hits.add(k)
        if todo:
            sampling = SamplingConfig(n=1, temperature=self.temperature, max_tokens=self.max_tokens, seed=self.seed)
            outs = self._backend().generate(list(todo.values()), sampling)
            self.calls += len(todo)
            for (k, m), out in zip(todo.items(), outs, strict=True):
                reply = out[0] if out else ""
                self._store(k, reply, m)
                replies[k] = reply
        verdicts = []
        for item, k in zip(items, keys, strict=True):
            tags = CRAFT_VARIANTS[item[3]]
            asked = self.asked(tags)
            checks, error = _read_reply(replies[k], asked)
            if "citations" in checks_for(tags) and self.citation_check == "rule":
                p = parse_craft(item[2], variant=item[3])
                boundary = set(p.gold_docs or ())
                checks["citations"] = int(bool(p.cited) and set(p.cited) <= boundary)
                checks = {c: checks[c] for c in checks_for(tags)}
            failures = tuple(CHECKS[c][2] for c, v in checks.items() if not v)
            verdicts.append(Verdict(checks, self.aggregate_score(checks), failures, k in hits, error))
        return verdicts


def _read_reply(reply: str, asked: Sequence[str]) -> tuple[dict[str, int], str | None]:
    """The checks of a judge reply (a JSON object, possibly inside other text); every check 0 when unreadable."""
    failed = dict.fromkeys(asked, 0)
    m = _JSON_RE.search(reply or "")
    if m is None:
        return failed, "no JSON object in the judge's reply"
    try:
        data = json.loads(m.group())
    except ValueError:
        return failed, "the judge's reply is not valid JSON"
    if not isinstance(data, dict):
        return failed, "the judge's reply is not a JSON object"
    out: dict[str, int] = {}
    for k in asked:
        v = data.get(k)
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, str) and v.strip() in ("0", "1"):
            v = int(v.strip())
        if v not in (0, 1):
            return failed, f"the judge's reply has no 0/1 for {k!r}"
        out[k] = int(v)
    return out, None
