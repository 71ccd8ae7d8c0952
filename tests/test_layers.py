"""The package's layers, read from the docs and checked against the code with a static scan (no import runs).

``docs/development.md`` (section "Layers") gives each package or top-level module of ``rag_curriculum`` a layer; a
module may import, at the top of its file, only what sits in a lower layer. That keeps the module list honest
about what depends on what, and the components free of import loops. Imports inside functions are for heavy
optional dependencies (torch, transformers, vLLM, Ray, bm25s, matplotlib ...) only. A module of the project that
imports such a dependency at its top (or imports one that does) is itself heavy (:func:`heavy_modules`), and may be
imported inside a function, so that ``curriculum --help`` does not pay for it; every other module of the project is
imported at the top of the file.
The top-level imports between the project's modules form no loop (:func:`test_no_import_loop_between_modules`), nor
do they with the imports inside functions added (:func:`test_no_import_loop_even_through_imports_inside_functions`).
Packages meet through public names: no module imports a private module (``_name``) of another package, anywhere in
the file (:func:`test_no_import_of_another_packages_private_module`); a package exports what the others use from
its ``__init__`` or a public module.
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
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: Imports of another package's private module today, each to be removed (never added to): (file, module).
KNOWN_REACHES: set[tuple[str, str]] = set()

#: Third-party packages slow to import or optional: a project module importing one at its top is heavy.
HEAVY = frozenset({
    "torch", "transformers", "trl", "accelerate", "peft", "vllm", "ray", "bm25s", "scipy", "numba", "matplotlib",
    "fastapi", "uvicorn", "starlette", "verl", "sentence_transformers", "faiss", "openai", "datasets", "pandas",
    "networkx", "requests", "httpx", "tenacity", "huggingface_hub", "tokenizers", "msgspec",
    "rag_retriever",  # optional (the retrieval extra): read only where an index is read or served
})

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


def test_the_picture_atop_development_md_draws_the_layers_table():
    """The picture of floors that opens docs/development.md names each package on the floor the table gives it."""
    block = re.search(r"<!-- picture -->\n```text\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block, f"{DOC}: no <!-- picture --> block"
    drawn: dict[str, int] = {}
    for line in block.group(1).splitlines():
        m = re.match(r"\s*(\d+)\s+(.*?)(?:\s{3,}|$)", line)
        if m:
            for name in m.group(2).split(" ─ "):
                drawn[name.strip().removesuffix("/__init__")] = int(m.group(1))
    assert drawn == documented_layers()


def _module(path: Path) -> tuple[list[str], bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return (parts[:-1] if is_pkg else parts), is_pkg


def _targets(node: ast.Import | ast.ImportFrom, parts: list[str], is_pkg: bool, *, lazy: bool = True
             ) -> list[list[str]]:
    """The project modules an import statement names (as dotted parts), or [] for a third-party import. With
    ``lazy``, a name a package exports lazily (:func:`lazy_map`) names the module it loads too: ``from ..generation
    import open_engine`` imports ``generation._engine`` when it runs."""
    if isinstance(node, ast.Import):
        return [a.name.split(".") for a in node.names if a.name.split(".")[0] == PACKAGE_ROOT]
    if node.level == 0:
        mod = (node.module or "").split(".")
        return [mod, *_lazy_targets(mod, node, lazy)] if mod[0] == PACKAGE_ROOT else []
    base = parts if is_pkg else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    target = base + (node.module.split(".") if node.module else [])
    if node.module is None:  # from .. import name: a submodule, or a name of the package itself
        out = []
        for a in node.names:
            sub = PKG.parent.joinpath(*target, a.name)
            out.append(target + [a.name] if sub.is_dir() or sub.with_suffix(".py").is_file() else target)
        return out + _lazy_targets(target, node, lazy)
    return [target, *_lazy_targets(target, node, lazy)]


def _lazy_targets(package: list[str], node: ast.ImportFrom, lazy: bool) -> list[list[str]]:
    exports = lazy_map(tuple(package)) if lazy else {}
    return [list(exports[a.name]) for a in node.names if a.name in exports]


@functools.cache
def lazy_map(package: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """name -> the module that a package's lazy exports (``lazy_exports(__name__, globals())`` in its ``__init__.py``:
    the names its ``if TYPE_CHECKING:`` block imports) load it from."""
    init = PKG.parent.joinpath(*package, "__init__.py")
    if not init.is_file():
        return {}
    tree = ast.parse(init.read_text(encoding="utf-8"))
    if not any(isinstance(call, ast.Call) and getattr(call.func, "id", None) == "lazy_exports" for call in ast.walk(tree)):
        return {}
    out = {}
    for block in tree.body:
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING":
            for node in block.body:
                if isinstance(node, ast.ImportFrom) and node.level:
                    module = (*package[: len(package) - (node.level - 1)], *(node.module or "").split("."))
                    out.update({a.asname or a.name: module for a in node.names})
    return out


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


def _dotted(parts: list[str]) -> str:
    return ".".join(parts)


def _third_party(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The top-level names of the third-party packages an import statement names."""
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    return {node.module.split(".")[0]} if node.level == 0 and node.module else set()


def _runtime(target: list[str], importer: str) -> list[str]:
    """The project modules an import of ``target`` runs: the target and each package above it that does not hold
    the importer (the root package exports lazily and is left out)."""
    out = [_dotted(target)]
    for i in range(2, len(target)):
        pkg = _dotted(target[:i])
        if not (importer == pkg or importer.startswith(pkg + ".")):
            out.append(pkg)
    return out


@functools.cache
def module_graph() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, list[tuple[int, list[str]]]]]:
    """(module -> project modules its top-level imports run, module -> third-party packages it imports at its top,
    file -> in-function imports of the project's modules as (line, target modules))."""
    graph: dict[str, set[str]] = {}
    third: dict[str, set[str]] = {}
    inner: dict[str, list[tuple[int, list[str]]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        parts, is_pkg = _module(path)
        me = _dotted(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[me], third[me] = set(), set()
        for node in _top_level(tree.body):
            targets = _targets(node, parts, is_pkg)
            if targets:
                for t in targets:
                    graph[me].update(m for m in _runtime(t, me) if m != me)
            else:
                third[me] |= _third_party(node)
        found = {(n.lineno, n.col_offset): [_dotted(t) for t in _targets(n, parts, is_pkg)]
                 for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        found = {k: v for k, v in found.items() if v}  # a dict: a function nested in another is walked twice
        if found:
            inner[str(path.relative_to(PKG))] = [(line, v) for (line, _), v in sorted(found.items())]
    return graph, third, inner


@functools.cache
def heavy_modules() -> frozenset[str]:
    """The project's modules that import a :data:`HEAVY` package when imported (at their top, or through a
    project module they import at their top)."""
    graph, third, _ = module_graph()
    heavy = {m for m, names in third.items() if names & HEAVY}
    grew = True
    while grew:
        more = {m for m, deps in graph.items() if m not in heavy and deps & heavy}
        heavy |= more
        grew = bool(more)
    return frozenset(heavy)


@functools.cache
def scan() -> tuple[dict[tuple[str, str], list[str]], Counter, set[str]]:
    """(component edges -> the files making them, in-function imports of light project modules per file, every
    component)."""
    edges: dict[tuple[str, str], list[str]] = {}
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
    heavy = heavy_modules()
    in_function = Counter({f: n for f, found in module_graph()[2].items()
                           if (n := sum(1 for _, mods in found if not set(mods) <= heavy))})
    return edges, in_function, components


def light_in_function_imports() -> dict[str, list[str]]:
    """file -> "line: module" for each in-function import of a project module that is not heavy."""
    heavy = heavy_modules()
    return {f: [f"{line}: {', '.join(m for m in mods if m not in heavy)}" for line, mods in found
                if not set(mods) <= heavy]
            for f, found in module_graph()[2].items() if any(not set(mods) <= heavy for _, mods in found)}


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


def test_no_in_function_import_of_a_light_project_module():
    """Inside a function, only heavy dependencies: third-party ones, or a project module importing one at its top."""
    offenders = light_in_function_imports()
    assert not offenders, (f"imports of the project's own (light) modules inside functions: {offenders}; import "
                           "them at the top of the file (inside a function only heavy optional dependencies: torch, "
                           "transformers, vllm, ray, bm25s, matplotlib, datasets ...)")


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One loop of the graph (its modules in order), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (loop := visit(d)):
                return loop
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (loop := visit(m)):
            return loop
    return None


def test_no_import_loop_between_modules():
    """The imports at the top of the files (and the packages they run on the way) form no loop, so every module
    imports first without depending on which other module was imported before it."""
    graph, _, _ = module_graph()
    assert len(graph) > 100 and graph["rag_curriculum.curricula._builder"]  # the scan found the modules' imports
    loop = _cycle(graph)
    assert loop is None, "import loop: " + " -> ".join(loop or [])
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def import_graph_with_function_imports() -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere: at its top (:func:`module_graph`) and inside its
    functions (an import there runs when the function does, and a loop through it still ties the two modules)."""
    graph, _, inner = module_graph()
    full = {m: set(deps) for m, deps in graph.items()}
    for file, found in inner.items():
        parts, _ = _module(PKG / file)
        me = _dotted(parts)
        for _, mods in found:
            for m in mods:
                full[me].update(x for x in _runtime(m.split("."), me) if x != me)
    return full


def test_no_import_loop_even_through_imports_inside_functions():
    """No two modules import each other, even when one of the imports waits inside a function: a loop hidden that
    way still makes each module depend on the other (which goes first, which to change first)."""
    full = import_graph_with_function_imports()
    assert "rag_curriculum.train._trainer" in full["rag_curriculum.train._trl"]  # train() imports it inside itself
    loop = _cycle(full)
    assert loop is None, ("import loop (an import inside a function counts too; move what both need to a module "
                          "below them): " + " -> ".join(loop or []))


def test_heavy_modules_are_the_ones_importing_heavy_packages():
    """A project module is heavy when it imports torch, transformers ... at its top, or imports a heavy project
    module there; only heavy modules may be imported inside a function."""
    heavy = heavy_modules()
    graph, third, _ = module_graph()
    for m in heavy:
        assert third[m] & HEAVY or graph[m] & heavy, m
    assert "rag_curriculum.shards" not in heavy and "rag_curriculum.verl.tool" in heavy  # verl at its top


def _is_module(parts: list[str]) -> bool:
    path = PKG.parent.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def _reaches(node: ast.Import | ast.ImportFrom, parts: list[str], is_pkg: bool) -> list[str]:
    """The private modules of another package than the importer's that an import statement names: a module path
    with a ``_name`` below the package (``..generation._base``), or a private submodule imported by name
    (``from ..retrieval import _config``). A top-level private module or package itself (``.._plumbing``,
    ``.._commit``) is not one: it is a component of its own."""
    me = _component(parts)
    out = []
    for target in _targets(node, parts, is_pkg, lazy=False):
        named = [target]
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            named += [target + [a.name] for a in node.names if a.name.startswith("_") and _is_module(target + [a.name])]
        out += [_dotted(t) for t in named if _component(t) != me and any(p.startswith("_") for p in t[2:])]
    return out


def private_reaches() -> dict[str, list[str]]:
    """file -> "line: module" for each import (at the top, inside a function or under TYPE_CHECKING) of a private
    module of another package (:func:`_reaches`)."""
    out: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        parts, is_pkg = _module(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for module in _reaches(node, parts, is_pkg):
                    out.setdefault(str(path.relative_to(PKG)), []).append(f"{node.lineno}: {module}")
    return out


def test_no_import_of_another_packages_private_module():
    """Packages meet through public names: each exports what the others use (its ``__init__`` or a public module),
    and no module reaches into another package's private one, so a private module can be split, renamed or merged
    without reading the rest of the project."""
    graph, _, _ = module_graph()
    assert "rag_curriculum.curricula._builder" in graph  # the scan found the private modules
    found = {(f, line.split(": ")[1]): line for f, lines in private_reaches().items() for line in lines}
    new = sorted(f"{f}:{line}" for (f, m), line in found.items() if (f, m) not in KNOWN_REACHES)
    assert not new, ("imports of another package's private module (import the name from the package, which "
                     f"exports what the others use): {new}")
    stale = sorted(KNOWN_REACHES - set(found))
    assert not stale, f"{stale} no longer reach into a private module: drop them from KNOWN_REACHES"


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
    # a name a package exports lazily names the module that defines it (imported when the name is)
    assert lazy_map(("rag_curriculum", "generation"))["open_engine"] == ("rag_curriculum", "generation", "_engine")
    lazy = ast.parse("from ..generation import SamplingConfig, open_engine").body[0]
    assert [_dotted(t) for t in _targets(lazy, parts, is_pkg)] == ["rag_curriculum.generation",
                                                                   "rag_curriculum.generation._engine"]


def test_the_private_module_rule_tells_a_package_from_its_neighbours():
    """A private module of the importer's own package passes, as do the top-level private modules and packages
    themselves; a private module inside another package (top-level ``_plumbing`` included) is a reach."""
    parts, is_pkg = ["rag_curriculum", "partition", "_run"], False
    src = ("from ._config import A\nfrom .._plumbing import B\nfrom .._commit import C\nfrom ..generation import D\n"
           "from ..generation._base import E\nfrom .._plumbing._output_sets import F\nfrom ..retrieval import _datasets\n"
           "from rag_curriculum.curricula._builder import G\n")
    reach = [m for n in ast.parse(src).body for m in _reaches(n, parts, is_pkg)]
    assert reach == ["rag_curriculum.generation._base", "rag_curriculum._plumbing._output_sets",
                     "rag_curriculum.retrieval._datasets", "rag_curriculum.curricula._builder"]


def test_rewards_read_trajectories_through_the_grammar_not_the_agents():
    """The trajectory grammar (tags, turn and trajectory parsers) is a leaf below both the agents and the rewards.
    The two share a layer, so an import of one by the other at a file's top is sideways and fails
    :func:`test_top_level_imports_only_point_down_the_layers`; none hides inside a function either. The rewards
    that read trajectories are the methods' (a floor above), and read them through the grammar too."""
    layers = documented_layers()
    assert layers["rewards"] == layers["agents"] > layers["grammar"]
    assert layers["methods"] > layers["rewards"]
    edges, _, _ = scan()
    assert ("methods", "grammar") in edges and ("agents", "grammar") in edges
    assert ("rewards", "agents") not in edges and ("agents", "rewards") not in edges
    inner = module_graph()[2]
    assert not [(f, mods) for f, found in inner.items() if f.startswith("rewards/")
                for _, mods in found if any(m.startswith("rag_curriculum.agents") for m in mods)]
