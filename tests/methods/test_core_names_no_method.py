"""The core (loaders, curricula and difficulty, shards, partition, train, evaluation, generation, rewards, agents) imports
no method: the methods register their templates, formats, rewards, evaluation scorers and parts of the search-agent
evaluation in the core's registries, and the core finds them there by name. The command line (``cli.py`` and
``_cli/``) finds them there too, but for a method's own command group."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rag_curriculum"
CORE = ("loaders", "curricula", "difficulty", "shards.py", "partition", "train", "evaluation", "generation",
        "rewards", "agents", "grammar", "prompts.py", "records.py", "cards.py")


def _imports_a_method(path: Path, text: str | None = None) -> bool:
    """Whether the module at ``path`` (its file's text, or ``text`` read as if it were there) imports a method."""
    depth = len(path.relative_to(PACKAGE).parts)  # a module n folders deep reaches the package with n dots
    source = path.read_text(encoding="utf-8") if text is None else text
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            absolute = node.module or ""
            if node.level == 0 and absolute.startswith("rag_curriculum.methods"):
                return True
            if node.level == depth and (absolute == "methods" or absolute.startswith("methods.")):
                return True
        elif isinstance(node, ast.Import) and any(a.name.startswith("rag_curriculum.methods") for a in node.names):
            return True
    return False


def test_the_core_imports_no_method():
    files = []
    for part in CORE:
        p = PACKAGE / part
        files += [p] if p.suffix == ".py" else sorted(p.rglob("*.py"))
    assert len(files) > 60
    importing = {f.relative_to(PACKAGE).as_posix() for f in files if _imports_a_method(f)}
    assert importing == set(), importing


#: The command line's modules that are a method's own commands: (module, why it must import its method).
METHOD_COMMANDS = {
    # `curriculum globalrag plans | table`: GlobalRAG's gold plans and its Table 1 are commands of their own, not a
    # part of a core command; a typer group sits on the CLI's floor (it prints through _cli.common), above the
    # methods, so the folder cannot hold it and the group imports the folder's functions.
    "_cli/globalrag.py": "GlobalRAG's own command group",
}


def test_the_command_line_imports_no_method_but_a_methods_own_commands():
    files = [PACKAGE / "cli.py", *sorted((PACKAGE / "_cli").rglob("*.py"))]
    assert len(files) > 10
    importing = {f.relative_to(PACKAGE).as_posix() for f in files if _imports_a_method(f)}
    assert importing == set(METHOD_COMMANDS), importing
    # `eval` itself (the search agent's tables, `eval agreement`) names none: its parts come from the registries
    assert not _imports_a_method(PACKAGE / "_cli" / "evaluate.py")


def test_the_check_sees_a_method_import():
    at = PACKAGE / "evaluation" / "_agent.py"
    for line in ("from ..methods import react_crag", "from ..methods.veritas import veritas_table",
                 "from rag_curriculum.methods.search_r1 import SearchR1Reward", "import rag_curriculum.methods.craft"):
        assert _imports_a_method(at, line + "\n"), line
    assert not _imports_a_method(at, "from ..agents import AGENT_PROTOCOLS\n")
    assert not _imports_a_method(at, "from .methods import x\n")  # a sibling module of that name, not the package's
    assert not _imports_a_method(at)
    assert not _imports_a_method(PACKAGE / "evaluation" / "_run.py")
