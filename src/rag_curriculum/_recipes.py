"""Where the shipped recipes live: inside the installed package (the wheel carries ``recipes/``), or at the
root of a source checkout (editable installs)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_NO_KEY = re.compile(r"Could not override '([^']+)'")


def recipes_root() -> Path:
    from importlib.resources import files

    packaged = Path(str(files("rag_curriculum"))) / "recipes"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "recipes"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("the recipes directory was not found in the package nor in a source checkout")


def list_recipes(kind: str) -> list[str]:
    """Recipe names (file stems) of one kind (``build``, ``train``), base configs (``_*``, ``base``) excluded."""
    d = recipes_root() / kind
    return sorted(p.stem for p in d.glob("*.yaml") if not p.stem.startswith("_") and p.stem != "base")


def compose(kind: str, name: str, overrides: list[str]) -> dict:
    """Compose ``recipes/<kind>/<name>.yaml`` with Hydra (defaults lists, ``key=value`` overrides) to a dict."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    d = recipes_root() / kind
    if not (d / f"{name}.yaml").exists():
        import difflib

        known = list_recipes(kind)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise FileNotFoundError(f"no {kind} recipe {name!r}{hint} Known: {', '.join(known)}")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(d), version_base="1.3"):
            cfg = hydra_compose(config_name=name, overrides=overrides)
    except Exception as e:  # hydra's override / composition errors
        message = unknown_key_message(e, f"{kind} recipe {name!r}", lambda parent: _keys_at(
            compose(kind, name, []), parent))
        if message:
            raise ValueError(message) from None
        raise
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _keys_at(tree: Any, parent: str) -> list[str]:
    node = tree
    for part in [p for p in parent.split(".") if p]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return []
    return sorted(map(str, node)) if isinstance(node, dict) else []


def unknown_key_message(error: BaseException, where: str, keys_at: Callable[[str], Iterable[str]],
                        schema_keys_at: Callable[[str], Iterable[str]] | None = None) -> str | None:
    """A one-line message for Hydra's "Could not override 'KEY'" (whose "use +KEY=value" hint misleads when the
    key is a typo): the keys that exist there, with a "did you mean". ``schema_keys_at`` gives the keys the schema
    knows but a recipe may leave out (those do take ``+KEY=value``). None for any other error."""
    import difflib

    m = _NO_KEY.search(str(error))
    if not m:
        return None
    key = m.group(1)
    parent, _, leaf = key.rpartition(".")
    present = sorted(set(keys_at(parent)))
    schema = sorted(set(schema_keys_at(parent)) if schema_keys_at else set())
    value = str(error).rsplit("=", 1)[-1] if "=" in str(error) else "VALUE"
    if leaf in schema:
        return f"{where} has no {key!r}: add it with +{key}={value} (a known option the recipe leaves out)"
    known = sorted(set(present) | set(schema))
    close = difflib.get_close_matches(leaf, known, n=1)
    hint = f"; did you mean {'.'.join([*([parent] if parent else []), close[0]])!r}?" if close else ""
    where_keys = f" under {parent!r}" if parent else ""
    return f"unknown option {key!r} in {where}{hint} Known{where_keys}: {', '.join(known) or '(none)'}"
