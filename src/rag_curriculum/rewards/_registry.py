"""The reward registry: recipes name reward functions, users add their own.

An entry is a factory (a class or a function, or a ``"module:attr"`` path to one) called with the recipe's
keyword arguments; it returns a batched, picklable TRL-style reward function.

>>> get_reward("rag-rl", gamma_format=0.5)
RagRlReward(gamma_answer=5.0, gamma_correct=5.0, gamma_incorrect=2.0, gamma_format=0.5, format_penalty=1.0, max_chars=4000, output_format='rag-rl', log_components=True, abstention_answer='unanswerable', abstain_penalty=0.0)
>>> get_reward("rag-rl-answr")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
rag_curriculum.errors.UnknownNameError: unknown reward 'rag-rl-answr'; did you mean 'rag-rl-answer'? Known: craft, ...
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._plumbing import mask_secrets
from ..errors import ConfigError
from ..registry import Registry

__all__ = ["EVAL_SCORERS", "REWARDS", "get_reward", "parse_reward_spec", "register_reward", "reward_entries",
           "reward_identity", "with_model_tokenizer"]

REWARDS: Registry[Callable[..., Callable]] = Registry("reward", check=callable,
                                                     must_be="a callable that makes a reward function")
REWARDS.register("rag-rl", "rag_curriculum.rewards._rag_rl:RagRlReward")
REWARDS.register("rag-rl-answer", "rag_curriculum.rewards._rag_rl:RagRlAnswerReward")
REWARDS.register("rag-rl-citation", "rag_curriculum.rewards._rag_rl:RagRlCitationReward")
REWARDS.register("rag-rl-format", "rag_curriculum.rewards._rag_rl:RagRlFormatReward")

#: A method's part of ``curriculum eval`` on evaluation sets, by name, so the evaluation names no method: an object
#: with ``variant_of(es)`` (the method's format of a set, or None: the set is not the method's),
#: ``rerender(es, template, index_base)`` (a set in another template: ``eval --template``),
#: ``make_judge(spec, args, *, default_cache)`` (``--judge``, or None), ``add_scores(records, rows, variant, judge,
#: *, strict_format)``, ``result_schema(base, records)``, ``entry(entry, records, variant, *, model, renamed)`` (the
#: summary's entry) and ``report_section(summary)`` (Markdown lines for ``table.md``, or None). CRAFT's is
#: :data:`rag_curriculum.methods.craft.EVAL_SCORER`.
EVAL_SCORERS: Registry[Any] = Registry("evaluation scorer", check=lambda s: hasattr(s, "variant_of"),
                                       must_be="an object with variant_of, rerender, make_judge, add_scores, ...")


#: The largest magnitude of a reward's weight (``RewardSpec.weight``'s range, on every route: a recipe, an override,
#: ``--reward``, the Python API), so that a weighted sum of rewards stays a finite number.
MAX_WEIGHT = 1e6


def weight_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a reward's weight (a finite number in -1e6..1e6), or None.

    >>> [weight_problem(v) for v in (2, -0.5, float("nan"), 1e308, "abc", True)]  # doctest: +NORMALIZE_WHITESPACE
    [None, None, 'is not a finite number (NaN or infinite)', 'is outside -1e+06..1e+06 (a weighted sum of rewards
    would overflow)', 'is not a number (a str)', 'is not a number (a bool)']
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is not a number (a {type(value).__name__})"
    if not math.isfinite(value):
        return "is not a finite number (NaN or infinite)"
    if abs(value) > MAX_WEIGHT:
        return f"is outside {-MAX_WEIGHT:g}..{MAX_WEIGHT:g} (a weighted sum of rewards would overflow)"
    return None


def number_problems(value: Any, key: str) -> list[str]:
    """``key = value`` for each number in ``value`` (a reward's keyword argument: a number, a list, a mapping) that is
    NaN or infinite: a reward built with one scores every sample NaN, which a weighted sum (TRL's ``nansum``) reads
    as 0."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key} = {value!r}"]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in number_problems(v, f"{key}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in number_problems(v, f"{key}.{i}")]
    return []


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def get_reward(name: str, **kwargs: Any) -> Callable:
    """Build the reward registered under ``name`` with ``kwargs`` (the factory validates them).

    Args:
        name: a registered reward (``rag-rl``, ``rag-rl-answer``, ``craft``, ``search-r1``, ``globalrag``,
            ``veritas``, ... or your own).
        **kwargs: the factory's keyword arguments (a recipe's ``rewards.N.kwargs``).

    Returns:
        The reward function: batched, picklable, called the TRL way.

    Raises:
        UnknownNameError: no reward of that name (with a "did you mean").
        ConfigError: an entry that cannot be imported or is not callable, or ``kwargs`` the factory refuses.

    Examples:
        >>> from rag_curriculum.rewards import get_reward
        >>> get_reward("rag-rl-answer", gamma_answer=1.0).gamma_answer
        1.0
    """
    factory = REWARDS.get(name)
    bad = [p for k, v in kwargs.items() for p in number_problems(v, k)]
    if bad:
        raise ConfigError(f"reward {name}: {', '.join(bad)}: not a finite number (a reward built with NaN or an "
                          "infinity scores every sample NaN, which the weighted sum reads as 0)",
                          hint="give finite numbers in the reward's kwargs")
    return factory(**kwargs)


def register_reward(name: str, factory: Callable[..., Callable] | str, *, overwrite: bool = False) -> None:
    """Register a reward factory (or a ``"module:attr"`` path to one) under ``name``.

    Recipes then name it (``rewards: [{name: NAME, kwargs: {...}}]``); a plug-in package can declare it as an
    entry point of the ``rag_curriculum.rewards`` group instead.

    Args:
        name: the reward's name.
        factory: called with a recipe's keyword arguments, it returns a reward function
            (``reward(completions, **columns) -> list[float]``); or a ``"module:attr"`` path, imported when first
            used.
        overwrite: replace a reward already registered under ``name``.

    Raises:
        ConfigError: ``name`` is taken (without ``overwrite``), or ``factory`` is not callable.

    Examples:
        ```python
        from rag_curriculum.rewards import get_reward, register_reward

        def exact(**kwargs):
            def reward(completions, answers, **columns):
                return [1.0 if c.strip() == a[0] else 0.0 for c, a in zip(completions, answers)]
            return reward

        register_reward("my-exact", exact)     # or "my_pkg.rewards:exact"
        get_reward("my-exact")(["Rome", "Paris"], [["Rome"], ["Rome"]])   # [1.0, 0.0]
        ```
    """
    REWARDS.register(name, factory, overwrite=overwrite)


def reward_entries(specs: Any, where: str | None = None) -> list[tuple[str, float, dict[str, Any]]]:
    """A recipe's ``rewards`` (a name, ``{name: weight}``, or a list of names, ``{name, weight, kwargs}`` mappings
    or ``RewardSpec`` dataclasses) as ``(name, weight, kwargs)`` entries, as ``curriculum train`` reads them, each
    weight checked where it enters (:func:`weight_problem`: a finite number in -1e6..1e6) and each number of its
    kwargs (finite), the refusal naming ``where`` (``recipe my-recipe``) and the key (``rewards.0.weight``).

    >>> reward_entries(["rag-rl", {"name": "rag-rl-answer", "weight": 2, "kwargs": {"gamma_answer": 1.0}}])
    [('rag-rl', 1.0, {}), ('rag-rl-answer', 2.0, {'gamma_answer': 1.0})]
    >>> reward_entries([{"name": "rag-rl", "weight": float("nan")}], where="recipe mine")
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.ConfigError: recipe mine: rewards.0.weight = nan is not a finite number (NaN or infinite); give a number in -1e+06..1e+06
    """
    at = f"{where}: " if where else ""
    keyed = isinstance(specs, Mapping) and "name" not in specs
    if isinstance(specs, str):
        specs = [specs]
    elif keyed:
        specs = [{"name": n, "weight": w} for n, w in specs.items()]
    elif isinstance(specs, Mapping):
        specs = [specs]
    if not isinstance(specs, Sequence):
        raise ConfigError(f"{at}rewards = {specs!r}: not a reward name or a list of rewards",
                          hint="write rewards: [rag-rl], or rewards: [{name: rag-rl, weight: 1.0}]")
    out = []
    for i, spec in enumerate(specs):
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            spec = dataclasses.asdict(spec)
        if isinstance(spec, str):
            out.append((spec, 1.0, {}))
            continue
        if not isinstance(spec, Mapping) or "name" not in spec:
            raise ConfigError(f"{at}rewards.{i}: a reward spec needs a 'name' (one of the registered rewards), got "
                              f"{spec!r}")
        key = f"rewards.{spec['name']}" if keyed else f"rewards.{i}.weight"
        weight = spec.get("weight", 1.0)
        if (why := weight_problem(weight)) is not None:
            raise ConfigError(f"{at}{key} = {_shown(weight)} {why}; give a number in {-MAX_WEIGHT:g}..{MAX_WEIGHT:g}",
                              hint="a reward's weight multiplies its score in the weighted sum TRL trains on")
        kwargs = dict(spec.get("kwargs") or {})
        kwargs.update({k: v for k, v in spec.items() if k not in ("name", "weight", "kwargs")})
        bad = [p for k, v in kwargs.items() for p in number_problems(v, f"rewards.{i}.kwargs.{k}")]
        if bad:
            raise ConfigError(f"{at}{', '.join(bad)}: not a finite number", hint="give finite numbers in the reward's "
                              "kwargs (a NaN would score every sample NaN, which the weighted sum reads as 0)")
        out.append((str(spec["name"]), float(weight), kwargs))
    if not out:
        raise ConfigError(f"{at}no reward given: name at least one registered reward, e.g. 'rag-rl'")
    return out


def reward_identity(specs: Any) -> list[list[Any]]:
    """What decides each sample's weighted reward: ``[name, weight, repr of the built reward]`` per entry of a
    recipe's ``rewards`` (:func:`reward_entries`), so ``rag-rl`` and ``rag-rl`` with its default keyword arguments
    spelled out are the same reward, and another ``gamma_answer`` is not.

    >>> reward_identity("rag-rl") == reward_identity([{"name": "rag-rl", "kwargs": {"gamma_answer": 5.0}}])
    True
    """
    return [[name, weight, repr(get_reward(name, **kwargs))] for name, weight, kwargs in reward_entries(specs)]


def parse_reward_spec(spec: str) -> list[dict[str, Any]]:
    """``--reward NAME[:WEIGHT],...`` as a recipe's ``rewards`` list, each name checked against the registry and each
    weight as a recipe's is (:func:`weight_problem`). What an error echoes of the value is masked (a URL given here
    by mistake keeps its password and token).

    >>> parse_reward_spec("rag-rl-answer:2, rag-rl-format")
    [{'name': 'rag-rl-answer', 'weight': 2.0, 'kwargs': {}}, {'name': 'rag-rl-format', 'weight': 1.0, 'kwargs': {}}]

    Raises:
        ConfigError: an empty entry, or a weight that is not a finite number in -1e6..1e6 (naming it).
        UnknownNameError: a reward that is not registered (with a "did you mean").
    """
    hint = "give --reward NAME[:WEIGHT],... e.g. rag-rl, or rag-rl-answer:1,rag-rl-citation:1,rag-rl-format:1"
    shown = mask_secrets(str(spec))
    out = []
    for item in str(spec).split(","):
        name, sep, weight = item.strip().partition(":")
        name = name.strip()
        if not name:
            raise ConfigError(f"--reward {shown!r}: an empty reward name", hint=hint)
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            w = weight
        if (why := weight_problem(w)) is not None:
            said = mask_secrets(item.strip()).partition(":")[2].strip()  # (masked whole: a URL's parts are not)
            why = "is not a number" if isinstance(w, str) else why
            raise ConfigError(f"--reward {shown!r}: the weight {said!r} of {name} {why}", hint=hint)
        REWARDS.get(name)  # an unknown name raises, with a "did you mean"
        out.append({"name": name, "weight": w, "kwargs": {}})
    return out


def with_model_tokenizer(funcs: Sequence[Callable], model: str) -> list[Callable]:
    """The rewards with the trained model's tokenizer where they decode as the trainer does and none was named (a
    ``tokenizer`` field left null: ``search-r1``, which scores the prompt and completion decoded together, special
    tokens kept, as Search-R1's reward manager does). ``curriculum train`` hands them the trained model's, and
    ``curriculum profile`` the profiled model's, so both score alike.

    >>> from rag_curriculum.methods.search_r1 import SearchEmReward, SearchR1Reward
    >>> with_model_tokenizer([SearchR1Reward(), SearchEmReward()], "Qwen/Qwen2.5-3B-Instruct")[0].tokenizer
    'Qwen/Qwen2.5-3B-Instruct'
    """
    out = []
    for f in funcs:
        names = {x.name for x in dataclasses.fields(f)} if dataclasses.is_dataclass(f) else set()
        out.append(dataclasses.replace(f, tokenizer=model) if "tokenizer" in names and f.tokenizer is None else f)
    return out
