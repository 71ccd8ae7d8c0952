"""The one registry (rag_curriculum.registry): entries type-checked when registered (objects) or first resolved
(dotted paths), and every extension point open to installed packages through entry points: a real
``*.dist-info`` with an ``entry_points.txt`` on sys.path, read by importlib.metadata as pip's installs are."""

from __future__ import annotations

import sys

import pytest

from rag_curriculum.errors import ConfigError, UnknownNameError
from rag_curriculum.registry import ENTRY_POINT_GROUPS, Registry


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """An installed package declaring a reward, a dataset and a broken reward as entry points."""
    (tmp_path / "plug_mod.py").write_text(
        "def my_reward(**kw):\n    return lambda completions, **k: [1.0] * len(completions)\n"
        "NOT_CALLABLE = 42\n")
    dist = tmp_path / "plug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[rag_curriculum.rewards]\nmy-reward = plug_mod:my_reward\nbroken = plug_mod:NOT_CALLABLE\n"
        "missing = plug_mod:nothing_here\nrag-rl = plug_mod:my_reward\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("plug_mod", None)


def test_every_extension_point_has_an_entry_point_group():
    from rag_curriculum.generation import BACKENDS
    from rag_curriculum.loaders import DATASETS
    from rag_curriculum.prompts import TEMPLATES
    from rag_curriculum.rewards import FORMATS, REWARDS
    from rag_curriculum.train import CONTROLLERS

    for reg in (BACKENDS, DATASETS, TEMPLATES, FORMATS, REWARDS, CONTROLLERS):
        assert reg.group == ENTRY_POINT_GROUPS[reg.kind] and reg.group.startswith("rag_curriculum.")


def test_entries_of_the_wrong_type_are_refused_naming_what_they_must_be():
    from rag_curriculum.loaders import DATASETS
    from rag_curriculum.prompts import TEMPLATES

    with pytest.raises(ConfigError, match="dataset 'mine' is registered as .*: it must be a subclass of "
                                          "rag_curriculum.loaders.DatasetLoader"):
        DATASETS.register("mine", dict)
    with pytest.raises(ConfigError, match=r"template 'mine' is registered as 42 \(int\): it must be a PromptTemplate"):
        TEMPLATES.register("mine", 42)
    assert "mine" not in TEMPLATES and "mine" not in DATASETS
    r = Registry("schedule", check=callable)
    r.register("typo", "builtins:lenn")  # a dotted path: checked when first resolved
    with pytest.raises(ConfigError, match="schedule 'typo': 'builtins:lenn' cannot be imported"):
        r.get("typo")
    r.register("late", "builtins:len")
    assert r.get("late") is len
    r.register("wrong", "sys:maxsize")
    with pytest.raises(ConfigError, match="schedule 'wrong' is registered as .*: it must be callable"):
        r.get("wrong")


def test_an_installed_package_plugs_in_through_its_entry_points(plugin_package, caplog):
    rewards = Registry("reward", check=callable)
    rewards.register("rag-rl", len)  # the toolkit's own: an entry point of that name does not replace it
    reward = rewards.get("my-reward")  # unknown here: the entry points are read, then it is found
    assert reward()(["a", "b"]) == [1.0, 1.0]
    assert rewards.get("rag-rl") is len
    with pytest.raises(ConfigError, match=r"reward 'broken' \(entry point of rag_curriculum.rewards\) is registered "
                                          r"as 42 \(int\): it must be callable"):
        rewards.get("broken")
    with pytest.raises(ConfigError, match="'missing' .*cannot be imported"):
        rewards.get("missing")
    with caplog.at_level("WARNING"):
        loaded = rewards.loaded()  # listing everything leaves the broken ones out, saying so
    assert set(loaded) == {"rag-rl", "my-reward"}
    assert "reward 'missing' left out" in caplog.text
    with pytest.raises(UnknownNameError, match="did you mean 'my-reward'"):
        rewards.get("my-rewards")
