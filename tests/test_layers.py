"""The package's layers, read from the docs and checked against the code with a static scan (no import runs).

``docs/development.md`` (section "Layers") gives each package or top-level module of ``rag_curriculum`` a layer; a
module may import, at the top of its file, only what sits in a lower layer. That keeps the module list honest
about what depends on what, and the components free of import loops. Imports inside functions are for heavy
optional dependencies (torch, transformers, vLLM, Ray, bm25s, matplotlib ...) only: none of the project's own
modules is imported inside a function in ``curricula/``, and elsewhere no file does so more often than today
(:data:`IN_FUNCTION_ALLOWED`, which may only shrink).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "rag_curriculum"
DOC = ROOT / "docs" / "development.md"

#: Top-level imports that point up or sideways today, each to be removed (never added to): (importer, imported).
KNOWN_UPWARD = {
    ("rewards", "agents"),  # rewards/_search.py, _veritas.py, _globalrag.py parse the agents' trajectories
    ("train", "_cli"),  # train/__main__.py runs the CLI's train command
}

#: Packages whose files import none of the project's modules inside a function.
NO_IN_FUNCTION = ("curricula",)

#: file (relative to src/rag_curriculum) -> in-function imports of the project's own modules today. A number may
#: only go down: lower it (or drop the file) when you move such an import to the top of its file.
IN_FUNCTION_ALLOWED = {
    "cards.py": 1, "cli.py": 2, "prompts.py": 1, "shards.py": 1,
    "_cli/build.py": 5, "_cli/common.py": 8, "_cli/data.py": 6, "_cli/evaluate.py": 13, "_cli/index.py": 4,
    "_cli/partition.py": 9, "_cli/recipes.py": 2, "_cli/train.py": 19,
    "agents/_globalrag.py": 4, "agents/globalrag.py": 1,
    "evaluation/_agent.py": 5, "evaluation/_config.py": 6, "evaluation/_craft.py": 4, "evaluation/_outcomes.py": 2,
    "evaluation/_report.py": 1, "evaluation/_run.py": 4,
    "generation/base.py": 5, "generation/engine.py": 3, "generation/hf_backend.py": 1,
    "generation/ray_engine.py": 2, "generation/runner.py": 2, "generation/scripted.py": 2,
    "loaders/flashrag.py": 1,
    "partition/_agent.py": 8, "partition/_config.py": 3, "partition/_inputs.py": 4, "partition/_merge.py": 1,
    "partition/_outputs.py": 3, "partition/_run.py": 2, "partition/_set.py": 2, "partition/_stats.py": 4,
    "retrieval/_config.py": 1, "retrieval/_corpus.py": 2, "retrieval/_index.py": 4,
    "rewards/_craft.py": 1, "rewards/_formats.py": 1, "rewards/_judge.py": 7, "rewards/_veritas.py": 3,
    "rewards/verl.py": 1,
    "train/_trl.py": 12, "train/adaptive.py": 4, "train/config.py": 4, "train/controllers.py": 2,
    "train/dynamic.py": 3, "train/lengths.py": 1, "train/pass_rates.py": 1, "train/recipes.py": 2,
    "train/verl.py": 4, "train/verl_adaptive.py": 2,
}

PACKAGE_ROOT = "rag_curriculum"  # the package's own __init__.py, as a component


def documented_layers(text: str | None = None) -> dict[str, int]:
    """component -> layer, from the table between the ``<!-- layers -->`` markers of docs/development.md."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    block = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    assert block, f"{DOC}: no <!-- layers --> ... <!-- /layers --> table"
    layers: dict[str, int] = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for name in re.findall(r"`(\w+)`", cells[1]):
            assert name not in layers, f"{name} is in two layers of the table"
            layers[name] = int(cells[0])
    return layers


def _module(path: Path) -> tuple[list[str], bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return (parts[:-1] if is_pkg else parts), is_pkg


def _targets(node: ast.Import | ast.ImportFrom, parts: list[str], is_pkg: bool) -> list[list[str]]:
    """The project modules an import statement names (as dotted parts), or [] for a third-party import."""
    if isinstance(node, ast.Import):
        return [a.name.split(".") for a in node.names if a.name.split(".")[0] == PACKAGE_ROOT]
    if node.level == 0:
        mod = (node.module or "").split(".")
        return [mod] if mod[0] == PACKAGE_ROOT else []
    base = parts if is_pkg else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    target = base + (node.module.split(".") if node.module else [])
    if node.module is None:  # from .. import name: a submodule, or a name of the package itself
        out = []
        for a in node.names:
            sub = PKG.parent.joinpath(*target, a.name)
            out.append(target + [a.name] if sub.is_dir() or sub.with_suffix(".py").is_file() else target)
        return out
    return [target]


def _component(parts: list[str]) -> str:
    return parts[1] if len(parts) > 1 else PACKAGE_ROOT


def _top_level(body: list[ast.stmt]):
    """Import statements that run when the module is imported (TYPE_CHECKING blocks excluded)."""
    for n in body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, ast.If):
            if not (isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"):
                yield from _top_level(n.body)
                yield from _top_level(n.orelse)
        elif isinstance(n, ast.Try):
            for block in (n.body, *(h.body for h in n.handlers), n.orelse, n.finalbody):
                yield from _top_level(block)


@functools.cache
def scan() -> tuple[dict[tuple[str, str], list[str]], Counter, set[str]]:
    """(component edges -> the files making them, in-function project imports per file, every component)."""
    edges: dict[tuple[str, str], list[str]] = {}
    in_function: Counter = Counter()
    components: set[str] = set()
    for path in sorted(PKG.rglob("*.py")):
        parts, is_pkg = _module(path)
        me = _component(parts)
        components.add(me)
        rel = str(path.relative_to(PKG))
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _top_level(tree.body):
            for target in _targets(node, parts, is_pkg):
                other = _component(target)
                if other != me:
                    edges.setdefault((me, other), []).append(rel)
        inner = {(n.lineno, n.col_offset) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)) and _targets(n, parts, is_pkg)}
        if inner:  # a set: a function nested in another is walked twice
            in_function[rel] = len(inner)
    return edges, in_function, components


def test_every_component_is_in_the_documented_layers():
    layers = documented_layers()
    _, _, components = scan()
    assert len(components) >= 20, sorted(components)  # the scan found the package
    missing = sorted(components - set(layers))
    assert not missing, f"place {missing} in a layer of the table in docs/development.md (section Layers)"
    stale = sorted(set(layers) - components)
    assert not stale, f"docs/development.md's layer table names {stale}, which src/rag_curriculum no longer has"


def test_top_level_imports_only_point_down_the_layers():
    layers = documented_layers()
    edges, _, _ = scan()
    assert ("curricula", "shards") in edges and ("_cli", "curricula") in edges  # the scan sees real edges
    bad = {e: files for e, files in edges.items() if layers.get(e[1], -1) >= layers.get(e[0], -1)}
    new = {e: sorted(set(files)) for e, files in bad.items() if e not in KNOWN_UPWARD}
    assert not new, ("imports at the top of a file that point up or sideways in docs/development.md's layers "
                     "(move the code down, or pass the check in as an argument): "
                     + "; ".join(f"{a} (layer {layers.get(a)}) -> {b} (layer {layers.get(b)}) in {fs}"
                                 for (a, b), fs in sorted(new.items())))


def test_the_documented_layers_are_a_picture_of_today_not_a_wish():
    """Every layer of the table holds something, and the known upward imports are still upward (an entry of
    KNOWN_UPWARD that the layers allow is not an offender: remove it)."""
    layers = documented_layers()
    assert sorted(set(layers.values())) == list(range(max(layers.values()) + 1))
    allowed = [e for e in KNOWN_UPWARD if layers[e[1]] < layers[e[0]]]
    assert not allowed, f"{allowed} point down the layers: drop them from KNOWN_UPWARD"


def test_no_in_function_import_of_the_projects_modules_in_the_reshaped_packages():
    _, in_function, _ = scan()
    offenders = {f: n for f, n in in_function.items() if n and f.split("/")[0] in NO_IN_FUNCTION}
    assert not offenders, (f"imports of the project's own modules inside functions: {offenders}; import them at "
                           "the top of the file (inside a function only heavy optional dependencies: torch, "
                           "transformers, vllm, ray, bm25s, matplotlib ...)")


def test_in_function_imports_elsewhere_only_shrink():
    _, in_function, _ = scan()
    grown = {f: (n, IN_FUNCTION_ALLOWED.get(f, 0)) for f, n in in_function.items()
             if n > IN_FUNCTION_ALLOWED.get(f, 0) and f.split("/")[0] not in NO_IN_FUNCTION}
    assert not grown, ("more imports of the project's own modules inside functions than allowed (file: (now, "
                       f"allowed)): {grown}; import them at the top of the file instead")
    assert not set(IN_FUNCTION_ALLOWED) & {f for f in IN_FUNCTION_ALLOWED if f.split("/")[0] in NO_IN_FUNCTION}


def test_the_scan_sees_what_it_checks(tmp_path):
    """The scanner on a made-up module: a relative import at the top, one inside a function (nested twice), one
    under TYPE_CHECKING (ignored), one of a third-party module (ignored)."""
    src = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\nimport json\n"
           "from ..shards import read_table\nfrom .. import errors\nfrom .._version import __version__\n"
           "if TYPE_CHECKING:\n    from ..train import TrainConfig\n"
           "def f():\n    import numpy\n    from ..retrieval import load_index\n"
           "    def g():\n        from . import config\n")
    tree = ast.parse(src)
    parts, is_pkg = ["rag_curriculum", "curricula", "example"], False
    top = [t for n in _top_level(tree.body) for t in _targets(n, parts, is_pkg)]
    assert [_component(t) for t in top] == ["shards", "errors", "_version"]
    inner = {(n.lineno, n.col_offset) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
             for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)) and _targets(n, parts, is_pkg)}
    assert len(inner) == 2
    assert documented_layers("<!-- layers -->\n| 1 | `a`, `b` |\n| 0 | `c` |\n<!-- /layers -->") == {
        "a": 1, "b": 1, "c": 0}
