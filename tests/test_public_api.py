"""The top-level package: the verbs and configs of every command load lazily, and none of them imports a heavy
library (torch, transformers, TRL, vLLM, matplotlib) until it is called."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

import rag_curriculum as rc
from rag_curriculum._plumbing._lazy import type_checking_imports


def test_every_exported_name_resolves_to_the_subpackages_object():
    from rag_curriculum.curricula import build_curriculum
    from rag_curriculum.evaluation import run_eval
    from rag_curriculum.partition import partition
    from rag_curriculum.rewards import RagRlReward
    from rag_curriculum.train import train

    assert rc.build_curriculum is build_curriculum and rc.run_partition is partition and rc.run_eval is run_eval
    assert rc.run_training is train and rc.RagRlReward is RagRlReward
    assert all(getattr(rc, name) is not None for name in rc.__all__)
    assert set(rc.__all__) <= set(dir(rc)) and set(type_checking_imports(inspect.getsource(rc))) <= set(rc.__all__)


@pytest.mark.parametrize("package", ["rag_curriculum", "rag_curriculum.agents", "rag_curriculum.curricula",
                                     "rag_curriculum.evaluation", "rag_curriculum.generation",
                                     "rag_curriculum.partition", "rag_curriculum.rewards", "rag_curriculum.train"])
def test_every_lazy_name_is_exported_and_resolves(package):
    """The names a package loads on first use (its TYPE_CHECKING imports) are in its ``__all__`` and ``dir()``,
    and each resolves to the object its module defines."""
    module = importlib.import_module(package)
    lazy = type_checking_imports(inspect.getsource(module))
    assert lazy and set(lazy) <= set(module.__all__) and set(module.__all__) <= set(dir(module))
    for name, (where, attr) in lazy.items():
        assert getattr(module, name) is getattr(importlib.import_module(where, package), attr)


def test_an_unknown_name_is_an_attribute_error():
    try:
        rc.no_such_verb  # noqa: B018
    except AttributeError as e:
        assert "no_such_verb" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_resolving_every_name_imports_no_heavy_library():
    code = ("import sys, json, rag_curriculum as rc\n"
            "[getattr(rc, n) for n in rc.__all__]\n"
            "print(json.dumps([m for m in ('torch', 'transformers', 'trl', 'vllm', 'matplotlib') "
            "if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
