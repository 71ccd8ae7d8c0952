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

from collections.abc import Callable
from typing import Any

from ..registry import Registry

__all__ = ["EVAL_SCORERS", "REWARDS", "get_reward", "register_reward"]

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
    return REWARDS.get(name)(**kwargs)


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
