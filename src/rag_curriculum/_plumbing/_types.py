"""A dataclass's ``to_dict`` (:class:`AsDict`), and whether a value fits a plain annotation (a number, a flag, a
string, or None), for settings handed to code that would otherwise fail deep inside with a TypeError
(``--backend-arg delay=abc``, ``grpo.learning_rate=abc``)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class AsDict:
    """A mixin for dataclasses (slotted ones too): ``to_dict()``, the fields as a dict (nested dataclasses, lists
    and dicts copied), for JSON records and logs."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


_PLAIN = (bool, int, float, str, type(None))


def expected_type(value: Any, hint: Any, *, number_as_string: bool = True) -> str | None:
    """None when ``value`` fits ``hint`` (or ``hint`` is not plain: lists, dicts, classes are left to the callee),
    else what it must be (``"float or null"``). An int fits a float; a bool fits only a bool. A number fits a
    string too, unless ``number_as_string`` is False (a callee that keeps the value as it is given, as
    ``trl.GRPOConfig`` does).

    >>> expected_type(0.5, float), expected_type(2, float), expected_type("abc", float), expected_type(None, int | None)
    (None, None, 'float', None)
    >>> expected_type(True, int), expected_type("x", list[int]), expected_type(2024, str | None)
    ('int', None, None)
    >>> expected_type(2024, str | None, number_as_string=False)
    'str or null'
    """
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if not allowed or not all(a in _PLAIN for a in allowed):
        return None
    if value is None:
        ok = type(None) in allowed
    elif number_as_string and str in allowed and isinstance(value, (bool, int, float)):  # a string setting written as a number (a
        ok = True  # revision "2024", a key of digits): YAML-parsed values are not refused for looking numeric
    elif isinstance(value, bool):
        ok = bool in allowed
    elif isinstance(value, int):
        ok = int in allowed or float in allowed
    elif isinstance(value, float):
        ok = float in allowed
    elif isinstance(value, str):
        ok = str in allowed
    else:
        ok = False
    return None if ok else " or ".join("null" if a is type(None) else a.__name__ for a in allowed)


def init_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of ``cls.__init__`` ({} when they do not resolve)."""
    try:
        return typing.get_type_hints(cls.__init__)
    except Exception:  # a forward reference that does not resolve here: nothing to check by
        return {}
