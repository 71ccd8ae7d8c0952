"""The modules of ``curricula/``, ``generation/`` and ``train/`` that the docs do not show are private (``_name.py``);
their old paths still import, with a DeprecationWarning, and give the same objects; the packages and their public
modules import no deprecated path."""

import importlib
import subprocess
import sys

import pytest

MOVED = {
    "curricula": ["builder", "config", "schedules", "leakage", "lengths"],
    "generation": ["base", "engine", "hf_backend", "openai_backend", "vllm_backend", "scripted", "ray_engine"],
    "train": ["batching", "lengths", "order", "progress", "pass_rates", "recipes", "config", "agent_adaptive", "dynamic"],
}
PUBLIC = {
    "curricula": ["adaptive", "distractors"],
    "generation": ["runner"],
    "train": ["adaptive", "controllers", "verl", "verl_adaptive", "_trl"],
}
CASES = [(pkg, name) for pkg, names in MOVED.items() for name in names]


@pytest.mark.parametrize(("pkg", "name"), CASES, ids=[f"{p}.{n}" for p, n in CASES])
def test_old_path_warns_and_resolves_to_the_private_module(pkg, name):
    sys.modules.pop(f"rag_curriculum.{pkg}.{name}", None)
    with pytest.warns(DeprecationWarning, match=rf"rag_curriculum\.{pkg}\.{name} is deprecated.*_{name}"):
        old = importlib.import_module(f"rag_curriculum.{pkg}.{name}")
    new = importlib.import_module(f"rag_curriculum.{pkg}._{name}")
    public = [n for n in vars(new) if not n.startswith("__")]
    assert public and all(getattr(old, n) is getattr(new, n) for n in public)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def test_the_packages_and_their_public_modules_import_no_deprecated_path():
    modules = [f"rag_curriculum.{p}" for p in MOVED] + [f"rag_curriculum.{p}.{m}" for p, ms in PUBLIC.items() for m in ms]
    modules += ["rag_curriculum.cli", "rag_curriculum._cli.train", "rag_curriculum.partition", "rag_curriculum.evaluation",
                "rag_curriculum.agents"]
    old = [f"rag_curriculum.{p}.{n}" for p, n in CASES]
    code = ("import importlib, sys, warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print([m for m in {old!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_backend_registry_names_the_private_modules():
    from rag_curriculum.generation import BACKENDS

    modules = {name: BACKENDS.get(name).__module__ for name in BACKENDS.names()}
    assert modules == {"openai": "rag_curriculum.generation._openai_backend", "scripted": "rag_curriculum.generation._scripted",
                       "transformers": "rag_curriculum.generation._hf_backend", "vllm": "rag_curriculum.generation._vllm_backend"}
