"""Where the shipped recipes live: inside the installed package (the wheel carries ``recipes/``), or at the
root of a source checkout (editable installs)."""

from __future__ import annotations

from pathlib import Path


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
    with initialize_config_dir(config_dir=str(d), version_base="1.3"):
        cfg = hydra_compose(config_name=name, overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
