"""Every command's options come from its config dataclass, written once: a field's flag, type,
default and help appear in ``--help``, parse into the command's keyword arguments, show in ``--print-config``
and in the docs' reference tables (``docs/hooks.py``) without being written anywhere else; no flag of before the
change went missing."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from rag_retriever import IndexConfig, ServeConfig
from typer.main import get_command
from typer.testing import CliRunner

from rag_curriculum._cli import evaluate as eval_cli
from rag_curriculum._cli.common import config_options, with_options
from rag_curriculum._settings import rule, setting_flag, settings_rows
from rag_curriculum.cli import app
from rag_curriculum.config import field_help
from rag_curriculum.curricula import BuildConfig, SourceSpec
from rag_curriculum.evaluation import EvalConfig
from rag_curriculum.evaluation._agent import AgentEvalConfig
from rag_curriculum.generation import EngineConfig
from rag_curriculum.partition import PartitionConfig, ProfileConfig

ROOT = Path(__file__).resolve().parents[2]

#: Every option of every command before the options were generated (captured from `curriculum CMD --help` at
#: 27ff10a's parent), and what the generation added: a flag may be added, never lost or respelled.
BEFORE = {
    "build": "--K --abstention-answer --allow-split-mismatch --batch-prompts --dataset --distractors --eval-set "
    "--include-unanswerable --index --index-base --input --leakage --max-distractors --n --no-allow-split-mismatch "
    "--no-include-unanswerable --no-overwrite --no-progress --on-error --order --out --overwrite --pieces "
    "--print-config --progress --rows-per-shard --schedule --seed --setting --split --tail --template --tokenizer "
    "--top-k --unanswerable-fraction --workers -K -P -d -i -n -o",
    "index": "--b --backend --corpus --dataset --delta --depth --input --k1 --method --no-overwrite --no-progress "
    "--on-error --out --overwrite --print-config --progress --stopwords --threads -d -i -o",
    "serve": "--access-log --default-topk --host --in-memory --index --max-batch --max-body-bytes --max-query-chars "
    "--max-topk --no-access-log --no-in-memory --port --threads --workers",
    "partition": "--K --agent --allow-identical-samples --api-key --backend --backend-arg --balance --base-url "
    "--batch-size --chunk-retries --chunk-size --chunks-per-call --concurrency --correct-f1 --cpus-per-worker "
    "--dataset --device --dtype --engine --gpu-memory-utilization --gpus-per-worker --input --keep-completions "
    "--max-chunks --max-context-tokens --max-model-len --max-tokens --max-turns --model --n --no-balance "
    "--no-keep-completions --no-overwrite --no-progress --no-question-seeds --no-strict-format --num-shards "
    "--num-workers --out --overwrite --pass-at --print-config --progress --question-seeds --ray-address "
    "--retriever --search-difficulty --seed --shard-index --strict-format --temperature --template "
    "--tensor-parallel-size --top-k --top-p --withhold-p -K -M -d -i -k -n -o -tp",
    "partition-merge": "--balance --correct-f1 --keep-completions --no-balance --no-keep-completions "
    "--no-strict-format --out --shards --strict-format -o",
    "eval run": "--agent --allow-identical-samples --api-key --backend --backend-arg --base-url --batch-size "
    "--best-of --chunk-retries --chunk-size --concurrency --cpus-per-worker --crag-weight --data --device --dtype "
    "--engine --faithfulness --gpu-memory-utilization --gpus-per-worker --index-base --judge --judge-arg --limit "
    "--max-model-len --max-tokens --max-turns --model --no-allow-identical-samples --no-overwrite --no-plots "
    "--no-progress --no-strict-format --num-workers --out --overwrite --plots --print-config --progress "
    "--ray-address --retriever --samples --seed --stats --strict-format --temperature --template "
    "--tensor-parallel-size --top-k --top-p -D -M -d -m -o -tp",
    "eval compare": "--json --name --out --plots --section -o",
    "eval agreement": "--field --json --reference-field",
    "inspect": "--dataset --json --on-error -d",
    "validate": "",
    "recipes": "",
    "train": "--dry-run --list --print-config",
    # A command added after the options were generated (its own flags, no config's)
    "warm-start": "--agent --copies --epochs --hidden-size --layers --learning-rate --model --out --overwrite "
    "--no-overwrite --plain --retriever --rows --seed --template --top-k",
    # a command added later (its own flags): a build or a partition bucket shared as a Hub dataset
    "push": "--dry-run --message --no-private --private -m",
    # commands added later (their own flags): GlobalRAG's gold plans and Table 1 (once `python -m
    # rag_curriculum.agents.globalrag`)
    "globalrag plans": "--dataset --input --musique-arrows --out -d -i -o",
    "globalrag table": "--no-paper-rows --paper-rows",
    # a command added later: a model's pass rate at several levels (ProfileConfig's fields, the backend block)
    "profile": "--K --allow-identical-samples --api-key --backend --backend-arg --base-url --batch-size "
    "--chunk-retries --chunk-size --chunks-per-call --concurrency --correct-f1 --cpus-per-worker --dataset --device "
    "--dtype --engine --gpu-memory-utilization --gpus-per-worker --group-size --input --levels --max-chunks "
    "--max-model-len --max-spread --max-tokens --model --n --no-allow-identical-samples --no-overwrite --no-progress "
    "--no-question-seeds --num-workers --out --overwrite --print-config --progress --question-seeds --ray-address "
    "--recipe --reward --samples --seed --temperature --tensor-parallel-size --top-p -K -M -d -i -n -o -tp",
    # commands added later: the verl launch scripts' helpers (once only `python -m rag_curriculum.verl`)
    "verl train-files": "", "verl reward-path": "", "verl reward-manager-path": "", "verl lengths": "--model",
    "verl check-lengths": "--dry-run --model --prompt-length --response-length",
    "verl steps": "--total-epochs --train-batch-size", "verl agent-data": "--overwrite --template",
    "verl layout": "--gpus-per-node --nnodes --prompts --rollouts",
}
ADDED = {"partition": {"--no-allow-identical-samples", "--retriever-timeout", "--retriever-retries"},
         "build": {"--profile", "--target", "--band", "--group-size",  # a model's level profile, the calibrated schedule
                   "--target-informative",
                   "--questions-from"},  # the questions of a partition's bucket
         "eval run": {"--max-context-tokens", "--retriever-timeout", "--retriever-retries",
                      "--reward", "--reward-arg"},  # Search-R1's own reward beside EM / F1
         "serve": {"--print-config", "--encoder", "--device", "--engine", "--replicas", "--ray-address",
                   "--replica-cpus", "--replica-gpus", "--max-connections", "--header-timeout",
                   "--body-timeout", "--min-body-rate",
                   # Every file hashed before serving; another encoder, allowed, another fingerprint
                   "--verify", "--no-verify", "--allow-other-encoder", "--no-allow-other-encoder",
                   "--max-results"},  # The passages one request may ask for
         "validate": {"--quick", "--full"},  # --full: every stored ranking ranked again
         "train": {"--profile"},  # a level profile each step's informative fraction is checked against
         "inspect": {"--row", "--tokenizer", "--n", "--where"},  # --n, --where: predictions of an eval or a partition
         "warm-start": {"--freeze-embeddings", "--no-freeze-embeddings",  # a base model's 262k-token table kept
                        "--batch-size",  # one example a step: no padding, a CPU's memory
                        "--retriever-retries"},  # a server's request sent again, as partition's and eval's
         # Dense and hybrid indexes
         "index": {"--kind", "--encoder", "--query-prefix", "--passage-prefix", "--pooling", "--normalize",
                   "--no-normalize", "--max-length", "--batch-size", "--device", "--faiss", "--max-memory", "--seed",
                   "--train-sample", "--nprobe", "--ef-search", "--refine", "--import-faiss", "--compress", "--rrf-k",
                   "--rrf-depth", "--block",
                   # The passages encoded on a Ray cluster (Ray Data)
                   "--engine", "--ray-address", "--num-workers", "--gpus-per-worker", "--cpus-per-worker",
                   # The BM25 preset (auto | bm25s | lucene)
                   "--bm25",
                   # Search settings tuned at build time
                   "--target-recall", "--tune-queries"}}

#: command -> (its configs, the fields no option of it sets, and why).
CONFIGS = {
    "partition": ([PartitionConfig], {"shards": "SHARDS, the argument", "rows_per_shard": "a recipe key",
                                      "backend_args": "the shared --backend-arg", "react_sentences": "a recipe key"}),
    "eval run": ([EvalConfig, AgentEvalConfig], {"backend_args": "the shared --backend-arg",
                                                  "template": "AgentEvalConfig's: the first --template",
                                                  "react_sentences": "a recipe key"}),
    "build": ([SourceSpec, BuildConfig], {"sources": "the SourceSpec options", "ability": "a recipe key",
                                          "K": "SourceSpec's: BuildConfig's --K", "n_up_to": "a recipe key"}),
    "index": ([IndexConfig], {}),
    "serve": ([ServeConfig], {}),
    "profile": ([ProfileConfig], {"shards": "SHARDS, the argument", "backend_args": "the shared --backend-arg"}),
}


def _commands() -> dict[str, Any]:
    root = get_command(app)
    found = {}

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = cmd

    walk(root, [])
    return found


def _flags(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("-")}


def _help(*args: str) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "240"})
    assert r.exit_code == 0, r.output
    return " ".join(r.output.replace("│", " ").split())


def test_no_flag_of_before_is_lost_or_respelled():
    commands = _commands()
    assert set(commands) == set(BEFORE)
    for name, cmd in commands.items():
        before = set(BEFORE[name].split())
        assert _flags(cmd) == before | ADDED.get(name, set()), (name, _flags(cmd) ^ before)
    # what was added is a config field's own option, which the command passes on
    assert "max_context_tokens" in eval_cli._AGENT_FIELDS and "max_context_tokens" in eval_cli.AGENT_ONLY


@pytest.mark.parametrize("command", list(CONFIGS))
def test_every_config_field_is_an_option_with_the_fields_help(command):
    classes, unset = CONFIGS[command]
    cmd = _commands()[command]
    params = {p.name: p for p in cmd.params}
    text = _help(*command.split())
    hidden, done = set(), set()
    for cls in classes:  # a field two configs share is the first one's option (eval: EvalConfig's)
        for f in dataclasses.fields(cls):
            if f.name in done:
                continue
            done.add(f.name)
            if f.name in unset and (f.name not in params or cls is SourceSpec and f.name == "K"):
                hidden.add(f.name)
                continue
            p = params[f.name]
            assert setting_flag(f) in p.opts, (cls.__name__, f.name, p.opts)
            assert p.help.startswith(field_help(cls, f.name)), (cls.__name__, f.name)
            assert p.default is None, f.name  # "not given": a recipe's value is kept
            assert setting_flag(f) in text and " ".join(field_help(cls, f.name).split()) in text, f.name
    assert hidden == set(unset), hidden ^ set(unset)


@dataclass
class Demo:
    seed: int = rule(0, ge=0, help="Sampling seed of the demo.")
    rate: float | None = rule(None, gt=0, le=1, help="A rate between 0 and 1.")
    names: list[str] = rule(default_factory=list, help="Names to keep.")
    fast: bool = rule(False, help="Go fast.")
    mode: str = rule("a", choices=("a", "b"), flag="--the-mode", help="Mode of the demo.")
    options: dict[str, Any] = rule(default_factory=dict, flag="--option", help="KEY=VALUE options.")
    recipe_only: int = rule(1, flag="", help="Set in recipes only.")


@dataclass
class MoreDemo(Demo):
    new_field: int | None = rule(None, ge=1, help="A field added later, written nowhere else.")


def _demo_app(cls: type, seen: dict[str, Any]) -> typer.Typer:
    demo_app = typer.Typer()

    @demo_app.command()
    @with_options(config_options(cls, short={"seed": "-s"}))
    def run(verbose: bool = typer.Option(False, help="A command-line-only option."), **options: Any) -> None:
        seen.update(options, verbose=verbose)

    return demo_app


def test_a_new_field_is_an_option_without_being_written_again():
    seen: dict[str, Any] = {}
    demo_app = _demo_app(MoreDemo, seen)
    r = CliRunner().invoke(demo_app, ["--help"], env={"COLUMNS": "240"})
    text = " ".join(r.output.replace("│", " ").split())
    for f in dataclasses.fields(MoreDemo):
        if f.name != "recipe_only":
            assert f.metadata["help"] in text, f.name
    assert "--new-field" in text and "--the-mode" in text and "--no-fast" in text and "-s" in text
    assert "[default: 0]" in text and "[default: a]" in text and "Repeatable." in text
    assert "--recipe-only" not in text
    r = CliRunner().invoke(demo_app, ["--new-field", "3", "-s", "7", "--rate", "0.5", "--names", "x", "--names", "y",
                                      "--fast", "--the-mode", "b", "--option", "k=1", "--verbose"])
    assert r.exit_code == 0, r.output
    assert seen == {"seed": 7, "rate": 0.5, "names": ["x", "y"], "fast": True, "mode": "b", "options": ["k=1"],
                    "new_field": 3, "verbose": True}
    assert all(type(seen[k]) is t for k, t in (("seed", int), ("rate", float), ("new_field", int)))
    seen.clear()
    assert CliRunner().invoke(demo_app, []).exit_code == 0
    assert seen["new_field"] is None and seen["seed"] is None  # not given: the recipe's value (or the default) holds
    r = CliRunner().invoke(demo_app, ["--new-field", "x"])
    assert r.exit_code == 2  # click parses by the field's type
    # the same field in an existing command's config: a subclass of IndexConfig gets its option
    @dataclass
    class MoreIndex(IndexConfig):
        shards_per_index: int = rule(4, ge=1, help="A new index setting.")

    opts = {p.name: p for p in config_options(MoreIndex)}
    assert set(opts) == {f.name for f in dataclasses.fields(MoreIndex)}
    info = typing.get_args(opts["shards_per_index"].annotation)[1]
    assert info.help == "A new index setting. \\[default: 4]"


def test_generated_options_refuse_a_mistake_in_the_command():
    with pytest.raises(TypeError, match="no field nosuch"):
        config_options(Demo, short={"nosuch": "-x"})
    with pytest.raises(TypeError, match="declared twice: seed"):
        @with_options(config_options(Demo))
        def run(seed: int = 0, **options: Any) -> None:
            pass


def _load_hook() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_reference_tables_render_every_field():
    hook = _load_hook()
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    markers = hook.MARKER.findall(text)
    named = {cls for _, cls, _ in markers}
    assert {"BuildConfig", "SourceSpec", "IndexConfig", "PartitionConfig", "EvalConfig", "AgentEvalConfig",
            "EngineConfig", "TrainConfig", "ServeConfig"} <= named
    page = hook.on_page_markdown(text, page=None, config=None, files=None)
    assert "<!-- settings" not in page
    for module, name, keys in markers:
        cls = getattr(importlib.import_module(module), name)
        table = hook.render(f"<!-- settings {module}:{name}{keys} -->")
        assert table in page
        for row in settings_rows(cls):
            line = next((x for x in table.splitlines() if x.startswith(f"| `{row['key']}` |")), None)
            assert line is not None, (name, row["key"])
            assert re.sub(r"\s+", " ", row["help"]).replace("|", "\\|")[:60] in line, (name, row["key"])
    # a new field is in the table without being written in the docs
    assert any(r["key"] == "new_field" for r in settings_rows(MoreDemo))
    table = hook.render("<!-- settings tests.cli.test_options_from_configs:MoreDemo -->")
    assert "| `new_field` | `--new-field` | an integer >= 1 (or null) | `null` | A field added later" in table
    assert "| `recipe_only` | (recipe key) |" in table and "| `options` | `--option` | dict[str, Any] | `{}` |" in table


@pytest.mark.slow
def test_print_config_shows_every_field(tmp_path):
    cases = {
        EvalConfig: ["eval", "-M", "m", "-D", str(tmp_path), "--backend", "scripted"],
        PartitionConfig: ["partition", str(tmp_path), "--backend", "scripted", "--model", "m"],
        IndexConfig: ["index", "-d", "musique", "-i", str(tmp_path / "x.jsonl"), "-o", str(tmp_path / "o")],
        BuildConfig: ["build", "-d", "musique", "-i", str(tmp_path / "x.jsonl"), "-o", str(tmp_path / "o")],
        ServeConfig: ["serve", "--index", str(tmp_path / "nowhere"), "--port", "8123"],
    }
    for cls, args in cases.items():
        r = CliRunner().invoke(app, [*args, "--print-config"])
        assert r.exit_code == 0, r.output
        shown = yaml.safe_load(r.stdout)
        assert set(shown) >= {f.name for f in dataclasses.fields(cls)}, (cls.__name__, set(shown))
    assert EngineConfig  # engine options are never recorded (nor printed): they do not change a completion


@pytest.mark.slow
def test_a_new_field_is_a_recipe_key_without_being_written_in_the_recipes():
    from rag_curriculum.config import bind, compose, resolve

    @dataclass
    class MoreEval(EvalConfig):
        new_field: int | None = rule(None, ge=1, help="A field added later, written nowhere else.")

    data = compose("eval", "rag-rl", ["new_field=3", "limit=5"], schema=MoreEval)
    assert "new_field" not in compose("eval", "rag-rl") and data["new_field"] == 3 and data["limit"] == 5
    assert bind(MoreEval, data).new_field == 3
    assert resolve(MoreEval, "eval", ["recipe=rag-rl"]).new_field is None  # the dataclass default
    # a field the shipped recipe leaves out takes key=value too (it used to need +key=value)
    assert resolve(EvalConfig, "eval", ["recipe=rag-rl", "index_base=1"]).index_base == 1
    r = CliRunner().invoke(app, ["eval", "recipe=rag-rl", "idnex_base=1", "--print-config"])
    assert r.exit_code == 2 and "did you mean 'index_base'?" in r.output  # a typo is still refused


def test_serve_validates_through_its_config_and_its_limits_are_the_servers():
    """serve's options are ServeConfig's: a value out of a field's range is one line naming the flag (exit 2),
    --index is still required by click, a contradiction exits 1; the server's defaults are the config's."""
    import inspect

    from rag_retriever._server import make_app

    for args, flag in ((["--port", "0"], "--port"), (["--max-body-bytes", "10"], "--max-body-bytes"),
                       (["--workers", "1000"], "--workers"), (["--host", " "], "--host")):
        r = CliRunner().invoke(app, ["serve", "--index", "nowhere", *args])
        errors = [x for x in r.output.splitlines() if x.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1 and flag in errors[0] and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(app, ["serve", "--port", "8000"])
    assert r.exit_code == 2 and "Missing option '--index'" in r.output
    r = CliRunner().invoke(app, ["serve", "--index", "nowhere", "--default-topk", "9", "--max-topk", "5"])
    assert r.exit_code == 1 and "--default-topk 9 is above --max-topk 5" in r.output
    cfg = ServeConfig(index="x")
    defaults = {k: v.default for k, v in inspect.signature(make_app).parameters.items() if k in cfg.limits()}
    assert defaults == cfg.limits() and set(defaults) == set(cfg.limits())


def test_partition_merge_overrides_are_partition_config_fields():
    """partition-merge's overrides are PartitionConfig's options (its fields' help, under their own heading), not
    given: the run's recorded value."""
    from rag_curriculum._cli.partition import MERGE_FIELDS
    from rag_curriculum.partition._merge import OUTPUT_OPTIONS

    assert set(MERGE_FIELDS) <= set(OUTPUT_OPTIONS)
    params = {p.name: p for p in _commands()["partition-merge"].params}
    text = _help("partition-merge")
    assert "Override the run's output settings" in text
    for name in MERGE_FIELDS:
        f = next(f for f in dataclasses.fields(PartitionConfig) if f.name == name)
        assert setting_flag(f) in params[name].opts and params[name].default is None
        assert params[name].help == field_help(PartitionConfig, name) + " \\[default: the run's]", name
        assert " ".join(field_help(PartitionConfig, name).split()) in text
