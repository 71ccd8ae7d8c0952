"""The curriculum controllers as plain objects: the AdaRFT update, mastery, determinism, state, the registry."""

from __future__ import annotations

import json
import random

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.train.controllers import (
    CONTROLLERS,
    Controller,
    GroupResult,
    make_controller,
    register_controller,
)


def _simulate(controller, steps, p_right, *, prompts=8, G=8, seed=0, K=20):
    """Feed the controller a scripted model: at level l each completion is right with probability p_right(l)."""
    rng = random.Random(seed)
    shown = []
    for step in range(steps):
        keys = [(f"q{step}-{i}", K) for i in range(prompts)]
        levels = controller.levels(keys)
        shown.append(levels)
        controller.update([GroupResult(k, lv, K, tuple(float(rng.random() < p_right(lv)) for _ in range(G)))
                           for (k, _), lv in zip(keys, levels, strict=True)])
    return shown


def test_target_band_settles_where_success_is_the_target():
    # success falls linearly from 1 at level 1 to 0 at level 20: 0.5 at level 10.5
    def p(level):
        return 1 - (level - 1) / 19

    for mode in ("round", "sample"):
        c = make_controller("target-band", K=20, target=0.5, eta=1.0, alpha=2.0, mode=mode, spread=1.0)
        shown = _simulate(c, 120, p)
        late = [lv for levels in shown[60:] for lv in levels]
        assert abs(sum(late) / len(late) - 10.5) < 1.5, mode
        assert 9 <= c.T <= 12
    # a higher target settles lower
    c = make_controller("target-band", K=20, target=0.8)
    _simulate(c, 120, p)
    assert 3 <= c.T <= 7  # p = 0.8 at level 4.8


def test_target_band_bounds_and_climb():
    c = make_controller("target-band", K=20, eta=2.0)
    steps = 0
    while c.T < 20:
        c.update([GroupResult("q", 1, 20, (1.0,) * 4)])
        steps += 1
    assert steps == 13  # eta * tanh(alpha * 0.5) = 1.52 levels per batch: 19 levels in 13 batches
    for _ in range(30):
        c.update([GroupResult("q", 20, 20, (0.0,) * 4)])
    assert c.T == 1.0
    assert c.levels([("a", 20), ("b", 3)]) == [1, 1]
    c.T = 7.5
    assert c.levels([("a", 20), ("b", 3)]) == [8, 3]  # half up; clipped to the row's own K


def test_mastery_moves_each_question():
    m = make_controller("mastery", K=4, new="start", start=2)
    m.update([GroupResult("a", 2, 4, (1.0, 1.0)), GroupResult("b", 2, 4, (0.0, 0.0)),
              GroupResult("c", 2, 4, (1.0, 0.0)), GroupResult("d", 4, 4, (1.0, 1.0))])
    assert m.levels([("a", 4), ("b", 4), ("c", 4), ("d", 4), ("new", 4)]) == [3, 1, 2, 4, 2]
    m = make_controller("mastery", K=4, threshold=5.0)  # a reward scale: right means a reward of 5 or more
    m.update([GroupResult("a", 1, 4, (6.0, 5.0))])
    assert m.levels([("a", 4), ("new", 4)]) == [2, 2]


def test_deterministic_and_resumable_midway():
    def p(level):
        return max(0.0, 1 - level / 12)

    full = make_controller("target-band", K=20, mode="sample", spread=1.5, seed=3)
    a = _simulate(full, 40, p, seed=1)
    again = make_controller("target-band", K=20, mode="sample", spread=1.5, seed=3)
    assert _simulate(again, 40, p, seed=1) == a
    # stop after 15 batches, save, load into a fresh controller, continue: the same levels
    first = make_controller("target-band", K=20, mode="sample", spread=1.5, seed=3)
    rng_steps = _simulate(first, 15, p, seed=1)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make_controller("target-band", K=20, mode="sample", spread=1.5, seed=0)
    resumed.load_state_dict(state)
    assert resumed.T == first.T and resumed.seed == 3
    assert rng_steps == a[:15]
    m = make_controller("mastery", K=20)
    _simulate(m, 5, p, seed=2)
    m2 = make_controller("mastery", K=20)
    m2.load_state_dict(json.loads(json.dumps(m.state_dict())))
    assert m2.per_question == m.per_question and m2.new_level == m.new_level
    with pytest.raises(ConfigError, match="saved curriculum controller is 'mastery' with K=20"):
        make_controller("target-band", K=20).load_state_dict(m.state_dict())


def test_registry_takes_user_controllers_and_checks_settings():
    class Fixed(Controller):
        name = "test-fixed"

        def __init__(self, *, K, seed=0, level=2):
            super().__init__(K=K, seed=seed)
            self.level = level

        def levels(self, rows):
            return [min(self.level, K) for _, K in rows]

        def update(self, results):
            self.batch += 1
            return 0.0

        def target(self):
            return float(self.level)

    register_controller("test-fixed", Fixed, overwrite=True)
    assert make_controller("test-fixed", K=5, level=3).levels([("a", 5)]) == [3]
    with pytest.raises(ConfigError, match=r"adaptive.kwargs.levle: not a setting of the 'test-fixed' controller; "
                                          r"did you mean 'level'\?"):
        make_controller("test-fixed", K=5, levle=3)
    # a dotted path needs no registration (the command line's way to a user controller)
    path = "rag_curriculum.train.controllers:Mastery"
    assert type(make_controller(path, K=4)).__name__ == "Mastery"
    with pytest.raises(ConfigError, match="not a Controller subclass"):
        make_controller("rag_curriculum.train.controllers:GroupResult", K=4)
    with pytest.raises(KeyError, match="did you mean 'target-band'"):
        CONTROLLERS.get("target-bnd")
    with pytest.raises(ConfigError, match="mode='nearest'"):
        make_controller("target-band", K=5, mode="nearest")


def test_the_documented_custom_controller_runs_and_resumes():
    """docs/adaptive.md's "Adding your own" example, as printed: registered, it moves its level, names its target,
    and a controller restored from its state picks the same levels."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "adaptive.md").read_text(encoding="utf-8")
    code = re.search(r"### Adding your own\n\n```python\n(.*?)```", page, re.S).group(1)
    try:
        exec(compile(code, "docs/adaptive.md", "exec"), {})
        c = make_controller("band-by-hops", K=3, step=1)
        assert c.update([GroupResult("q", 1, 3, (1.0, 1.0))]) == 1.0
        assert c.levels([("a", 3), ("b", 1)]) == [2, 1] and c.target() == 2.0
        resumed = make_controller("band-by-hops", K=3, step=1)
        resumed.load_state_dict(json.loads(json.dumps(c.state_dict())))
        assert resumed.levels([("a", 3)]) == [2] and resumed.target() == 2.0
    finally:
        CONTROLLERS._entries.pop("band-by-hops", None)  # the example's name, free again for a rerun
