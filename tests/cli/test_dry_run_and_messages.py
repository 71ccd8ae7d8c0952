"""The dry run refuses what the real run refuses, the documented hard-negatives route trains on a max curriculum,
and the output and text a person reads. The bad-input cases are in the command line's corpus
(tests/cli/test_bad_input_corpus.py), the
rewards' in tests/rewards/test_bad_reward_inputs.py, the finished and re-targeted runs in
tests/train/test_grpo.py and tests/train/test_search_agent.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data) -> Path:
    pytest.importorskip("bm25s")
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("t4") / "idx"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    return out


def _build(tmp_path_factory, schedule: str, n: int) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("t4") / f"musique-{schedule}"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n, K=3)], schedule=schedule,
                                 out=str(out), seed=0), command="t")
    return out


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    return _build(tmp_path_factory, "max", 8)


@pytest.fixture(scope="module")
def min_max_dir(tmp_path_factory, shared_data) -> Path:
    return _build(tmp_path_factory, "min-max", 8)


# -- the dry run runs every check of the real run before the model loads ------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("overrides, words", [
    (["recipe=cpu-tiny", "batch.prompts_per_step=16"], "8 row(s) to train on, fewer than one batch of 16 prompts"),
    (["recipe=search-r1", "agent.retriever={IDX}"], "8 row(s) to train on, fewer than one batch of 512 prompts"),
])
def test_the_dry_run_refuses_a_curriculum_shorter_than_one_batch(overrides, words, max_dir, index_dir):
    pytest.importorskip("trl")
    for more in (["--dry-run"], []):  # the same line from both, before any model loads
        r = run("train", *[o.format(IDX=index_dir) for o in overrides], f"data.shards={max_dir}", *more)
        assert words in one_error(r), r.output
        assert "hint: lower batch.prompts_per_step" in r.output


# -- the documented route of hard negatives moved during training -------------------------------------------
def _documented_hard_negatives_command() -> list[str]:
    text = (ROOT / "docs" / "search-agents.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    block = next(b for b in blocks if "agent.difficulty=hard-negatives adaptive.controller=target-band" in b)
    lines = block.replace("\\\n", " ").splitlines()
    build = next(line for line in lines if line.startswith("curriculum build"))
    assert "recipe=musique-max" in build and "outputs/musique-max" in build  # the build it trains on is shown
    train = next(line for line in lines if "agent.difficulty=hard-negatives" in line)
    return shlex.split(train.split("#")[0])[1:]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["max", "min-max"])
def test_the_documented_hard_negatives_route_runs_on_a_max_build(schedule, max_dir, min_max_dir, index_dir,
                                                                 tiny_model_dir, caplog):
    """The command docs/search-agents.md gives (on this machine's index, model and a small batch) passes the dry run
    on a max build; a min-max build is warned about, not refused: a search agent's controller moves the level of
    its searches, it does not re-render the rows (no adaptive build needed)."""
    pytest.importorskip("trl")
    import logging

    args = _documented_hard_negatives_command()
    assert "data.shards=outputs/musique-max" in args
    shards = max_dir if schedule == "max" else min_max_dir
    args = [f"data.shards={shards}" if a.startswith("data.shards=") else a for a in args]
    small = [f"agent.retriever={index_dir}", f"model.name_or_path={tiny_model_dir}", "batch.prompts_per_step=2",
             "batch.per_device_completions=2", "grpo.num_generations=2", "grpo.bf16=false", "grpo.use_vllm=false",
             "grpo.max_steps=1", "grpo.max_completion_length=16"]
    with caplog.at_level(logging.WARNING):
        r = run(*args, *small, "--dry-run")
    assert r.exit_code == 0, r.output
    assert "ok: binds to trl.GRPOConfig" in " ".join(r.output.split())
    assert "not an adaptive one" not in r.output
    warned = "has fewer hard negatives than asked" in caplog.text
    assert warned == (schedule == "min-max"), caplog.text


SCRIPT = '''
def wrong(messages, n, seed):
    return ["<think>t</think> Final answer: zzzq"] * n
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    import sys

    d = tmp_path_factory.mktemp("scripts")
    (d / "trust4_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(d))
    yield "trust4_script"
    sys.path.remove(str(d))
    sys.modules.pop("trust4_script", None)


# -- text a person reads ----------------------------------------------------------------------------------
def test_recipe_summaries_are_whole_sentences_and_cite_no_internal_issue():
    from rag_curriculum.config import KINDS, list_recipes, recipe_path, recipe_summary

    seen = 0
    for kind in KINDS:
        for name in list_recipes(kind):
            seen += 1
            summary = recipe_summary(kind, name)
            assert summary.endswith("."), (kind, name, summary)  # the whole first sentence, never cut
            header = "".join(line for line in recipe_path(kind, name).read_text().splitlines(True)
                             if line.startswith("#"))
            assert not re.search(r"\bissue \d+", header), (kind, name)
    assert seen >= 40
    r = run("recipes", "train")
    assert r.exit_code == 0 and "curriculum order, checkpoints, curriculum_steps.jsonl) before renting GPUs." in \
        " ".join(r.output.replace("│", " ").split())


def test_serve_help_names_the_toolkits_verl_tool_not_the_removed_one():
    r = run("serve", "--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "search_r1_like" not in text and "rag_curriculum.verl.tool.SearchTool" in text
    from rag_retriever import _server

    assert "search_r1_like" not in (_server.__doc__ or "")


def test_the_partition_table_counts_samples_with_k(max_dir, script, tmp_path):
    out = tmp_path / "p"
    r = run("partition", max_dir, "--backend", "scripted", "--model", f"{script}:wrong", "--pass-at", 2,
            "--no-progress", "-o", out)
    assert r.exit_code == 0, r.output
    assert "learnable (0 < c < k)" in r.output and "c < n" not in r.output
    card = (out / "learnable" / "README.md").read_text()
    assert "learnable (0 < c < k)" in card and "pass rate c/k" in card and "c < n" not in card


def test_the_quickstart_says_what_to_run_next():
    from rag_curriculum.cli import COMMANDS

    text = (ROOT / "scripts" / "quickstart.sh").read_text()
    after = text.split("curriculum validate outputs/musique-min-max", 1)[1]
    assert "Next:" in after
    named = re.findall(r"^\s+curriculum (\w+)", after, re.M)
    assert named == ["inspect", "train", "train"]
    assert set(named) <= set(COMMANDS)
    assert "Every stage on a CPU" in after and "## Every stage on a CPU" in (ROOT / "README.md").read_text()


def test_development_md_documents_the_quick_way_to_run_one_file():
    text = (ROOT / "docs" / "development.md").read_text()
    assert ".venv/bin/python -m pytest -q tests/rewards/test_rag_rl.py" in text
    for path in re.findall(r"python -m pytest -q (tests/\S+\.py)", text):
        assert (ROOT / path).is_file(), path


# -- output a person reads ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def agent_run(tmp_path_factory, index_dir, shared_data):
    """An agent evaluation through the command (not a terminal, as when piped) at 80 columns, on a set whose folder
    name starts with its dataset's; with its INFO log lines."""
    import logging

    from rag_curriculum._cli import common

    data = _build(tmp_path_factory, "max", 4)
    named = data.parent / "musique-dev"
    data.rename(named)
    out = tmp_path_factory.mktemp("t4") / "eval-agent"
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("rag_curriculum")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO  # the command line's level (pytest's root handler stays)
    width = common.out.width
    common.out.width = 80
    try:
        r = run("eval", "--agent", "search-r1", "--retriever", index_dir, "--backend", "scripted", "--model",
                "policy=support.agent_policies:search_then_answer", "--data", named, "--samples", 2, "--max-turns", 3,
                "--out", out)
    finally:
        common.out.width = width
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert r.exit_code == 0, r.output
    return r, out, [x.getMessage() for x in records]


@pytest.mark.slow
def test_an_agent_eval_shows_progress_lines_when_not_on_a_terminal(agent_run):
    _, _, lines = agent_run
    ours = [x for x in lines if x.startswith("policy · musique-dev")]
    assert ours[0] == "policy · musique-dev: 4 question(s) x 2 sample(s), at most 3 turn(s) each"
    assert any(re.match(r"policy · musique-dev: turn 2 of 3, \d+ trajectory\(ies\) going", x) for x in ours), ours
    assert re.match(r"policy · musique-dev: done in \d+ s: EM [\d.]+, F1 [\d.]+", ours[-1]), ours


def test_an_agent_eval_reads_whole_at_80_columns_and_names_sets_once(agent_run):
    r, out, _ = agent_run
    assert "…" not in r.output and "musique-musique" not in r.output
    text = " ".join(r.output.replace("│", " ").split())
    assert "format errors and how trajectories ended" in text and "unclosed_search" in text
    assert "searches / q" in text and "2 plot(s) in plots/" in text
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert [e["set"] for e in summary["evals"]] == ["musique-dev"]
    assert summary["plots"] == ["plots/scores.png", "plots/ended.png"]
    assert all((out / p).stat().st_size > 0 for p in summary["plots"])
    table = (out / "table.md").read_text()
    assert "| model | set | trajectories | format errors | ended |" in table
    (entry,) = summary["evals"]
    assert f"unclosed_search {entry['format_errors']['unclosed_search']}" in table and "answer " in table


def test_bars_carry_their_values_and_a_column_of_equal_values_has_no_best(monkeypatch, tmp_path):
    from rag_curriculum import _plots
    from rag_curriculum.evaluation._report import main_table

    figs = []
    monkeypatch.setattr(_plots, "save_png", lambda fig, path: figs.append(fig) or Path(path))
    _plots.bar_panels(["musique"], [("F1", {"a": [0.0], "b": [0.0]})], title="zeros", xlabel="dataset",
                      path=tmp_path / "x.png")
    labels = [t.get_text() for ax in figs[0].axes for t in ax.texts]
    _plots.pyplot().close(figs[0])  # save_png (replaced here) closes what it writes
    assert labels == ["0.0", "0.0"]
    entry = {"dataset": "musique", "setting": "distractor", "overall": {"answer_f1": 0.0, "citation_f1": 0.0,
                                                                        "joint_f1": 0.0}}
    _, rows = main_table({"evals": [{**entry, "model": "a"}, {**entry, "model": "b"}]})
    assert not any("**" in c for row in rows for c in row), rows
    entry_b = {**entry, "model": "b", "overall": {"answer_f1": 0.5, "citation_f1": 0.0, "joint_f1": 0.0}}
    _, rows = main_table({"evals": [{**entry, "model": "a"}, entry_b]})
    assert [c for row in rows for c in row if "**" in c] == ["**50.00**"]


def test_a_withholding_curriculum_shows_p_not_the_rows_level(tmp_path, monkeypatch):
    import json

    from rag_curriculum import _plots
    from rag_curriculum.train._agent_adaptive import SearchCurriculumHook
    from rag_curriculum.train._ledger import step_line

    line = step_line({"loss": 0.0, "curriculum/level_mean": 1.0, "curriculum/p_mean": 0.3,
                      "rollout/searches": 1.25, "rollout/gold_found": 0.5}, 2, 3)
    assert line == "step 2/3  loss 0  p 0.3  searches 1.25  gold_found 0.5"
    assert "level 2" in step_line({"loss": 0.0, "curriculum/level_mean": 2.0}, 1, 3)
    levels = tmp_path / "curriculum_levels.jsonl"
    levels.write_text("".join(json.dumps({"step": s, "batch": s, "p_target": p, "p_mean": p, "success": 0.5}) + "\n"
                              for s, p in ((1, 0.0), (2, 0.1), (3, 0.2))))
    hook = SearchCurriculumHook(None, mode="withhold", K_of=lambda r: 6, num_generations=2, levels_file=levels,
                                schedule="zerosearch", p_start=0.0, p_end=0.5)
    figs = []
    monkeypatch.setattr(_plots, "save_png", lambda fig, path: figs.append(fig) or Path(path))
    hook.plot(tmp_path)
    ax = figs[0].axes[0]
    label, ys, ylim = ax.get_ylabel(), [round(y, 3) for y in ax.lines[0].get_ydata()], ax.get_ylim()
    _plots.pyplot().close(figs[0])
    assert label == "withholding probability p" and ys == [0.0, 0.1, 0.2]
    assert ylim[0] < 0 < 0.5 < ylim[1] < 1


# -- readers ---------------------------------------------------------------------------------------------
def test_an_agent_evals_out_loads_as_its_trajectories_and_writes_back_to_parquet(agent_run, tmp_path):
    """``datasets.load_dataset(OUT, split="test")`` reads the trajectories (its card's configs), not eval_config.json;
    trajectories read with pandas write back to Parquet (no empty ``shaped`` struct)."""
    import datasets
    import pandas as pd

    _, out, _ = agent_run
    ds = datasets.load_dataset(str(out), split="test")
    assert ds.num_rows == 8 and {"model", "set", "row_id", "searches", "answer"} <= set(ds.column_names)
    assert set(ds["model"]) == {"policy"} and "config" not in ds.column_names
    (path,) = (out / "trajectories" / "policy").glob("*.jsonl")
    frame = pd.read_json(path, lines=True)
    assert any(s for s in frame["searches"])  # searches there, each with its shaped record
    frame.to_parquet(tmp_path / "t.parquet")
    back = pd.read_parquet(tmp_path / "t.parquet")
    from rag_curriculum.rewards import get_reward

    em = get_reward("search-em", log_components=False)
    rows = back.to_dict("records")
    assert em(["x"] * len(rows), answers=[["Paris"]] * len(rows), trajectory=[r for r in rows]) == [0.0] * len(rows)


def test_a_closed_context_evals_out_loads_as_its_results(tmp_path, shared_data, script):
    import datasets
    from conftest import MUSIQUE_DEV

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    data = tmp_path / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 3)], setting="distractor",
                                 out=str(data), seed=0), command="t")
    out = tmp_path / "run"
    r = run("eval", "--model", f"m={script}:wrong", "--data", data, "--backend", "scripted", "--no-plots",
            "--samples", 2, "-o", out)
    assert r.exit_code == 0, r.output
    ds = datasets.load_dataset(str(out), split="test")
    assert ds.num_rows == 3 and ds["model"] == ["m"] * 3 and len(ds["completions"][0]) == 2


def test_search_environment_resets_from_a_pandas_row_and_says_when_nothing_matched(index_dir, max_dir):
    import pandas as pd

    from rag_curriculum.agents import NO_RESULTS
    from rag_curriculum.shards import read_table
    from rag_curriculum.train import SearchEnvironment

    frame = read_table(max_dir).to_pandas()
    row = frame.iloc[0]
    assert type(row["passages"]).__name__ == "ndarray"
    env = SearchEnvironment(str(index_dir), top_k=2)
    assert env.reset(**row) is None  # NumPy arrays read as lists, not refused
    assert env.search(row["question"]).startswith("Doc 1(Title: ")
    assert env.search("the of and") == NO_RESULTS and env.record["searches"][-1]["ids"] == []
    assert env.record["searches"][0]["shaped"] is None  # not {}: pandas could not write it back
    pd.DataFrame([env.record]).to_parquet(index_dir.parent / "record.parquet")


def test_the_tool_route_searches_first_when_its_first_turn_is_a_search(index_dir, max_dir):
    from rag_curriculum.methods.search_r1 import from_environments
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import SearchEnvironment

    row = read_rows(max_dir)[0]
    env = SearchEnvironment(str(index_dir), top_k=2, first_search="<think>t</think><search> {question} </search>")
    observation = env.reset(**row)
    assert observation.startswith(f'\n\nResults of a first search for "{row["question"].strip()}":\nDoc 1(Title: ')
    (first,) = env.record["searches"]
    assert first["scripted"] is True and first["query"] == row["question"].strip()
    completion = [{"role": "assistant", "content": "<answer>x</answer>"}]  # no tool message: nothing dropped
    (traj,) = from_environments([completion], [env])
    assert traj["searches"][0]["gold"] == first["gold"] and "dropped" not in traj["searches"][0]


def test_search_prompts_is_documented_beside_from_rows_and_the_snippet_runs(tmp_path, index_dir, max_dir,
                                                                          monkeypatch):
    import trl

    text = (ROOT / "docs" / "search-agents.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "search_prompts(" in b)
    head = block.split("trainer = GRPOTrainer(", 1)[0]  # everything but building the trainer (a model download)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "agent-rows").symlink_to(max_dir)
    (tmp_path / "indexes").mkdir()
    (tmp_path / "indexes" / "musique-train").symlink_to(index_dir)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(head, "search-agents.md", "exec"), scope)  # noqa: S102 - the page's own code
    rows, rollout = scope["rows"], scope["rollout"]
    assert rows[0]["prompt"][0]["content"].rstrip().endswith(rows[0]["question"].strip())
    assert len(rollout.rows) == len(rows) and scope["weights"] == [1.0] and trl
