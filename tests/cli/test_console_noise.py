"""What the command line does not print: bm25s' debug lines, the training run's YAML, the quickstart's warnings
about its own settings, known deprecation warnings of its dependencies."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import MUSIQUE_TRAIN
from support.cli_runs import run


# -- noise ----------------------------------------------------------------------------------------------------
def test_index_prints_no_bm25s_debug_line(shared_data, tmp_path):
    import logging

    from rag_curriculum._cli.common import configure_logging

    configure_logging()
    bm25s = logging.getLogger("bm25s")
    seen = []
    for h in logging.getLogger().handlers:
        seen.append(all(f(logging.LogRecord("bm25s", logging.DEBUG, "x", 1, "Building index from IDs", None, None))
                        if callable(f) else f.filter(logging.LogRecord("bm25s", logging.DEBUG, "x", 1, "m", None,
                                                                       None)) for f in h.filters))
    assert seen and not any(seen), "bm25s's DEBUG line passes a handler"
    assert bm25s.name == "bm25s"


def test_a_real_training_run_prints_one_config_line_not_the_yaml():
    import inspect

    from rag_curriculum._cli import train as cli_train

    src = inspect.getsource(cli_train.train)
    assert "if main and (print_config or dry_run)" in src and "train_config.yaml" in src


# -- the quickstart does not warn about its own settings ----------------------------------------------------
def test_the_quickstart_build_fits_its_own_batch(shared_data, tmp_path, caplog):
    import logging
    import shlex

    text = (Path(__file__).parents[2] / "scripts" / "quickstart.sh").read_text()
    line = text.split("curriculum build ", 1)[1].split("\ncurriculum validate", 1)[0]
    args = shlex.split(line.replace("\\\n", " ").split("#")[0].replace('"$INPUT"', str(MUSIQUE_TRAIN))
                       .replace('"$N"', "all"))
    args[args.index("--out") + 1] = str(tmp_path / "mm")
    with caplog.at_level(logging.WARNING):
        r = run("build", *args, "--no-progress")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "mm" / "manifest.json").read_text())
    assert manifest["trainer_tail"]["unseen_rows"] == 0 and manifest["num_rows"] % 42 == 0
    # MuSiQue's rows hold 20 paragraphs, so a few cannot show level 20's 19 distractors: that is said about the
    # data (rows short of their level, named in the manifest), and nothing about the quickstart's own settings
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert all("manifest.json: short_rows" in m for m in warned), warned
    assert "0 row(s) never seen" in r.output, r.output


def test_known_dependency_deprecations_are_hidden_on_the_command_line():
    import warnings

    from rag_curriculum._cli.common import KNOWN_WARNINGS, configure_logging

    with warnings.catch_warnings(record=True) as seen:  # the filters are put back as they were afterwards
        warnings.simplefilter("always")
        configure_logging()
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning,
                      stacklevel=1)
        warnings.warn("a warning of our own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["a warning of our own"] and KNOWN_WARNINGS


# -- said once, readable when piped -------------------------------------------------------------------------------
def test_a_table_piped_to_a_file_keeps_its_rows_on_one_line(monkeypatch):
    import io

    from rich.table import Table

    from rag_curriculum._cli import common
    from rag_curriculum._cli.common import PIPED_WIDTH, _Console

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(common, "_watched", lambda: False)  # no terminal anywhere: a log file, CI
    sink = io.StringIO()
    table = Table()
    for i in range(10):
        table.add_column(f"column {i}")
    table.add_row(*[f"value number {i}" for i in range(10)])
    _Console(file=sink).print(table)
    lines = sink.getvalue().splitlines()
    assert len(lines) == 5 and max(map(len, lines)) <= PIPED_WIDTH, sink.getvalue()  # rich's 80 folds each cell
    assert "value number 9" in lines[3]


def test_a_table_piped_to_a_terminal_fits_the_terminal(monkeypatch):
    """``curriculum inspect DIR | tee log`` from a shell: stdout is a pipe, but a person reads it on a terminal of
    100 columns, which the table fits (not the 200 a log without a terminal gets)."""
    import io
    import os

    from rich.table import Table

    from rag_curriculum._cli import common

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(common, "_watched", lambda: True)
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((100, 40)))
    sink = io.StringIO()
    table = Table()
    for i in range(10):
        table.add_column(f"column {i}")
    table.add_row(*[f"value number {i}" for i in range(10)])
    common._Console(file=sink).print(table)
    lines = sink.getvalue().splitlines()
    assert max(map(len, lines)) <= 100 and "value" in sink.getvalue(), sink.getvalue()


def test_only_the_toolkits_info_lines_are_shown(monkeypatch):
    """The command line's logging shows the toolkit's INFO lines (its progress, what it wrote) and the libraries'
    warnings, not their INFO lines (matplotlib's "generated new fontManager" on a first plot)."""
    import io
    import logging

    from rag_curriculum._cli import common

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    sink = io.StringIO()
    monkeypatch.setattr("sys.stderr", sink)
    common.configure_logging()
    logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
    logging.getLogger("matplotlib.font_manager").warning("a font is missing")
    logging.getLogger("rag_curriculum.partition").info("wrote 8 rows")
    logging.getLogger("rag_retriever.cli").info("index built")
    text = sink.getvalue()
    assert "fontManager" not in text and "a font is missing" in text
    assert "wrote 8 rows" in text and "index built" in text
    common.configure_logging(quiet=True)
    logging.getLogger("rag_curriculum.partition").info("said only without --quiet")
    assert "said only without --quiet" not in sink.getvalue()


def test_a_build_says_its_capped_levels_once(tmp_path, caplog):
    import logging

    from conftest import TWOWIKI_TRAIN

    with caplog.at_level(logging.INFO, logger="rag_curriculum"):
        r = run("build", "-d", "2wikimultihopqa", "-i", TWOWIKI_TRAIN, "--n", 20, "--K", 10, "--schedule", "min-max",
                "--out", tmp_path / "b", "--no-progress")
    assert r.exit_code == 0, r.output
    said = [m for m in caplog.messages if "asks for more distractors" in m]
    assert len(said) == 1 and "`--distractors bm25 --index DIR`" in said[0], caplog.messages
    assert "capped levels:" not in r.output  # the summary does not say it again (curriculum inspect does)



def test_piped_the_libraries_bars_are_turned_off(monkeypatch):
    import io
    import os

    from rag_curriculum._cli import common

    for name in common.PIPED_QUIET_BARS:
        monkeypatch.setenv(name, "x")  # recorded, so the test's own changes are undone
        monkeypatch.delenv(name)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    common.configure_logging()
    assert all(os.environ[name] == "1" for name in common.PIPED_QUIET_BARS)


# -- warnings that fit two lines ------------------------------------------------------------------------------------
#: The longest text a warning's template may hold (its placeholders counted as two characters each): with the
#: logger's name before it and the values put in, two lines of a terminal 100 to 120 columns wide.
WARNING_CHARACTERS = 160


def _warning_templates(root: Path) -> list[tuple[str, str]]:
    """(file:line, template) of each ``log.warning(...)`` / ``warnings.warn(...)`` whose message is written out."""
    import ast

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if isinstance(node, ast.BinOp):
            left, right = text(node.left), text(node.right)
            return None if left is None or right is None else left + right
        return None

    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: text(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and node.args
                    and ast.unparse(node.func).endswith(("log.warning", "logger.warning", "warnings.warn"))):
                message = node.args[0]
                if isinstance(message, ast.Call) and isinstance(message.func, ast.Attribute) \
                        and message.func.attr == "format":  # TEMPLATE.format(...)
                    message = message.func.value
                said = constants.get(message.id) if isinstance(message, ast.Name) else text(message)
                if said is not None:
                    found.append((f"{path.relative_to(root.parents[1])}:{node.lineno}", said))
    return found


def test_every_warning_the_toolkit_writes_fits_two_lines():
    """A warning is read on a terminal between progress lines: what happened and what to do, in two lines (the
    longest were 520 characters once their values were in); the reasons go to the docs."""
    import re

    root = Path(__file__).parents[2]
    templates = [t for src in ("src/rag_curriculum", "retriever/src/rag_retriever", "plumbing/src/rag_plumbing")
                 for t in _warning_templates(root / src)]
    assert len(templates) > 60  # (the scan found them)
    def length(said: str) -> int:  # each placeholder (%s, %.3g, {step}, {frac:.3g}) as two characters
        return len(re.sub(r"%[-.\d]*[sdrgf]|\{[^{}]*\}", "{}", said))

    assert any("every group's rewards are equal" in said for _, said in templates)  # (TEMPLATE.format(...) read)
    long = [(where, length(said)) for where, said in templates if length(said) > WARNING_CHARACTERS]
    assert not long, f"warnings longer than {WARNING_CHARACTERS} characters (say less, or move it to the docs): {long}"
