"""The toolkit's one plotting module (rag_curriculum._plots): the public plot names are its functions, each writes
a PNG atomically (no temporary file left, no Software tag: bytes that depend on the data only), and importing the
module (or the modules that re-export it) does not import matplotlib."""

import json
import subprocess
import sys

import pytest

from rag_curriculum import _plots, cards
from rag_curriculum.train import _dynamic as dynamic
from rag_curriculum.train import adaptive


def test_public_plot_names_are_the_plotting_modules():
    assert cards.pyplot is _plots.pyplot
    assert cards.plot_levels is _plots.plot_build_levels
    assert cards.plot_histogram is _plots.plot_histogram
    assert adaptive.plot_levels is _plots.plot_adaptive_levels
    assert dynamic.plot_dynamic is _plots.plot_dynamic


@pytest.mark.slow
def test_each_plot_is_one_png_written_atomically_and_deterministic(tmp_path):
    open_before = set(_plots.pyplot().get_fignums())  # figures another test in this process left open
    levels = [{"step": s, "level_target": 1 + s % 3, "level_mean": 1.5, "success": float("nan") if s == 2 else s / 5}
              for s in range(1, 6)]
    dyn = [{"step": s, "informative_groups": s, "generated_groups": 8, "trained_fraction_informative": 0.5,
            "refills": s % 2, "retired_total": s} for s in range(1, 5)]
    draw = {
        "build.png": lambda p: cards.plot_levels([1, 1, 2, 3, 3], p, title="levels"),
        "hist.png": lambda p: cards.plot_histogram([0.0, 0.5, 0.5, 1.0], p, title="pass rates", xlabel="c/n"),
        "adaptive.png": lambda p: adaptive.plot_levels(levels, p, K=3, success_range=(0, 1)),
        "dynamic.png": lambda p: dynamic.plot_dynamic(dyn, p),
        "sub/bars.png": lambda p: _plots.bar_panels(["a", "b"], [("F1", {"m1": [0.5, None], "m2": [0.2, 0.9]})],
                                                    title="t", xlabel="x", path=p),
        "lines.png": lambda p: _plots.plot_lines({"m1": ([1, 2], [0.3, 0.6])}, p, title="t", xlabel="l", ylabel="y"),
    }
    for name, fn in draw.items():
        first = fn(tmp_path / "one" / name)
        assert first == tmp_path / "one" / name, name  # the path written, its folder made
        fn(tmp_path / "two" / name)
        data = first.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"Software" not in data, name
        assert data == (tmp_path / "two" / name).read_bytes(), name  # same data, same bytes
    written = sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert written == sorted(draw)  # nothing else (no temporary file) left beside them
    assert set(_plots.pyplot().get_fignums()) == open_before  # every figure these plots made is closed


def test_importing_the_plot_modules_does_not_import_matplotlib():
    code = ("import json, sys; import rag_curriculum._plots, rag_curriculum.cards, rag_curriculum.train.adaptive, "
            "rag_curriculum.train._dynamic, rag_curriculum.evaluation._plots; "
            "print(json.dumps('matplotlib' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) is False
