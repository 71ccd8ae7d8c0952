"""train's modules that the docs do not show are private (_config, _recipes, _batching, _order, _progress,
_pass_rates, _lengths, _dynamic, _agent_adaptive); their old paths still import, with a DeprecationWarning, and give
the same objects."""

import importlib
import subprocess
import sys

import pytest

MOVED = ["batching", "lengths", "order", "progress", "pass_rates", "recipes", "config", "agent_adaptive", "dynamic"]


@pytest.mark.parametrize("name", MOVED)
def test_old_path_warns_and_resolves_to_the_private_module(name):
    sys.modules.pop(f"rag_curriculum.train.{name}", None)
    with pytest.warns(DeprecationWarning, match=rf"rag_curriculum\.train\.{name} is deprecated.*_{name}"):
        old = importlib.import_module(f"rag_curriculum.train.{name}")
    new = importlib.import_module(f"rag_curriculum.train._{name}")
    public = [n for n in vars(new) if not n.startswith("__")]
    assert public and all(getattr(old, n) is getattr(new, n) for n in public)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def test_the_package_and_its_public_modules_import_no_deprecated_path():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import rag_curriculum.train, rag_curriculum.train.adaptive, rag_curriculum.train.controllers, "
            "rag_curriculum.train.verl, rag_curriculum.train.verl_adaptive, rag_curriculum.train._trl, "
            "rag_curriculum._cli.train\n"
            f"import sys; print([m for m in {MOVED!r} if 'rag_curriculum.train.' + m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
