"""The core (loaders, curricula and difficulty, shards, partition, train, evaluation, generation, rewards, agents) imports
no method: the methods register their templates, formats, rewards and evaluation scorers in the core's registries,
and the core finds them there by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rag_curriculum"
CORE = ("loaders", "curricula", "difficulty", "shards.py", "partition", "train", "evaluation", "generation",
        "rewards", "agents", "grammar", "prompts.py", "records.py", "cards.py")
#: Core modules that still import a method, each with the reason (an honest list, meant to shrink).
STILL = {
    "evaluation/_agent.py": "the search-agent evaluation (eval --agent): Search-R1's reward, ReAct's format and "
                            "VERITAS's judge, not yet behind a registry",
}


def _imports_a_method(path: Path) -> bool:
    depth = len(path.relative_to(PACKAGE).parts)  # a module n folders deep reaches the package with n dots
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            absolute = node.module or ""
            if node.level == 0 and absolute.startswith("rag_curriculum.methods"):
                return True
            if node.level == depth and (absolute == "methods" or absolute.startswith("methods.")):
                return True
        elif isinstance(node, ast.Import) and any(a.name.startswith("rag_curriculum.methods") for a in node.names):
            return True
    return False


def test_the_core_imports_no_method_but_the_listed_ones():
    files = []
    for part in CORE:
        p = PACKAGE / part
        files += [p] if p.suffix == ".py" else sorted(p.rglob("*.py"))
    assert len(files) > 60
    importing = {f.relative_to(PACKAGE).as_posix() for f in files if _imports_a_method(f)}
    assert importing == set(STILL), importing


def test_the_check_sees_a_method_import(tmp_path):
    assert _imports_a_method(PACKAGE / "evaluation" / "_agent.py")
    assert not _imports_a_method(PACKAGE / "evaluation" / "_run.py")
