"""`curriculum build`: a curriculum (or an evaluation set) from a dataset file or the Hub, or from a recipe."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import console, fail, out, reported_errors

RECIPE_FIELDS_SINGLE = ("dataset", "input", "n", "split")


def _parse_n(value: Any) -> Any:
    """``--n`` / ``n=``: a count, or 'all'. Anything that is not a string is left to the config's type check."""
    from .._settings import SettingError

    if value is None or (isinstance(value, str) and value.strip().lower() in ("all", "none", "null")):
        return None
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            raise SettingError("n", value, "an integer >= 1, or 'all'", flag="--n") from None
    return value


def config_from_mapping(d: dict[str, Any]):
    """A recipe (flat single-dataset form, or `sources:` for a mixture) to a BuildConfig."""
    from ..curricula import BuildConfig, SourceSpec

    d = dict(d)
    single = {k: d.pop(k, None) for k in RECIPE_FIELDS_SINGLE}
    if not d.get("sources") and single["dataset"]:
        d["sources"] = [SourceSpec(single["dataset"], single["input"], _parse_n(single["n"]), single["split"])]
    else:
        sources = d.get("sources") or []
        if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
            raise ValueError(f"sources = {sources!r}: must be a list of {{dataset, input, n, split, K}} mappings")
        d["sources"] = [{**s, "n": _parse_n(s.get("n"))} for s in sources]
    return BuildConfig.from_dict(d)


def build(
    ctx: typer.Context,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="recipe=NAME and key=value overrides of the recipe (Hydra syntax), e.g. recipe=musique-min-max n=500",
        show_default=False)] = None,
    dataset: Annotated[list[str] | None, typer.Option(
        "--dataset", "-d", help="hotpotqa | musique | 2wikimultihopqa. Repeat for a mixture, with a quota as "
        "NAME:N (e.g. -d musique:10000 -d hotpotqa:5000).", show_default=False)] = None,
    input: Annotated[list[str] | None, typer.Option(
        "--input", "-i", help="Local file for each --dataset, in the same order (official release JSON/JSONL, Hub "
        "JSONL/Parquet). Without it the dataset is downloaded from the Hugging Face Hub.", show_default=False)] = None,
    schedule: Annotated[str | None, typer.Option(
        help="max | linear | min-max | piecewise (with --pieces) | a registered schedule. \\[default: min-max]",
        show_default=False)] = None,
    pieces: Annotated[str | None, typer.Option(
        help="Piecewise schedule as LEVEL:FRACTION,... ('K' = the top level), e.g. 1:0.25,5:0.25,K:0.5.")] = None,
    K: Annotated[int | None, typer.Option("--K", "-K", help="Top level K for every dataset. \\[default: the paper's: "
                                          "HotpotQA 10, MuSiQue 20, 2Wiki 10]", show_default=False)] = None,
    n: Annotated[str | None, typer.Option(
        "--n", "-n", help="Questions to sample without replacement (per dataset), or 'all'. \\[default: all, or "
        "the recipe's]", show_default=False)] = None,
    seed: Annotated[int | None, typer.Option(help="Build seed: sampling, distractors, order. \\[default: 0]",
                                             show_default=False)] = None,
    order: Annotated[str | None, typer.Option(
        help="level (schedule order) | shuffled | hops-level (the paper's Table 3). \\[default: level]",
        show_default=False)] = None,
    setting: Annotated[str | None, typer.Option(
        help="curriculum (training) | distractor | ideal (evaluation sets from the dev split). "
        "\\[default: curriculum]", show_default=False)] = None,
    split: Annotated[str | None, typer.Option(help="Split to read (train/dev). \\[default: from the file name]",
                                              show_default=False)] = None,
    max_distractors: Annotated[int | None, typer.Option(help="Distractor-setting cap. \\[default: 18]",
                                                        show_default=False)] = None,
    template: Annotated[str | None, typer.Option(help="Prompt / output format. \\[default: rag-rl]",
                                                 show_default=False)] = None,
    batch_prompts: Annotated[int | None, typer.Option(
        "--batch-prompts", "-P", help="The trainer's prompts per step (RAG-RL: 42): report the rows it would "
        "never see.", show_default=False)] = None,
    tail: Annotated[str | None, typer.Option(help="keep | trim | pad the row count to a multiple of "
                                             "--batch-prompts. \\[default: keep]", show_default=False)] = None,
    eval_set: Annotated[list[str] | None, typer.Option(
        "--eval-set", help="Evaluation shard directory to check for train/eval leakage (repeatable).",
        show_default=False)] = None,
    leakage: Annotated[str | None, typer.Option(help="refuse | drop | warn when training questions are in an "
                                                "evaluation set. \\[default: refuse]", show_default=False)] = None,
    rows_per_shard: Annotated[int | None, typer.Option(help="Rows per Parquet shard. \\[default: 10000]",
                                                       show_default=False)] = None,
    on_error: Annotated[str | None, typer.Option(help="raise | skip bad source records (skips are reported). "
                                                 "\\[default: raise]", show_default=False)] = None,
    out_dir: Annotated[str | None, typer.Option("--out", "-o", help="Output shard directory.",
                                                show_default=False)] = None,
    allow_split_mismatch: Annotated[bool, typer.Option(
        help="Allow a training curriculum from a dev/test file, or an evaluation set from a train file.")] = False,
    include_unanswerable: Annotated[bool, typer.Option(
        help="Keep MuSiQue-Full's unanswerable (answerable=false) questions.")] = False,
    workers: Annotated[int | None, typer.Option(
        help="Processes that render and write shards (the output is the same). \\[default: one per CPU]",
        show_default=False)] = None,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Tokenizer (Hub id or directory) of the model you will train: writes a prompt_tokens "
        "column (chat template applied) and the longest prompt into the manifest, so trainers can refuse prompts "
        "they would truncate. Needs the train extra.", show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output of this toolkit.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Build a curriculum of controlled difficulty (RAG-RL 3.2, 4.4) as ordered Parquet shards, a manifest and a
    data card.

    [bold]Examples[/]

      curriculum build --dataset musique --input musique_ans_v1.0_train.jsonl --schedule min-max --K 20 --n 5000

      curriculum build recipe=hotpotqa-linear input=hotpot_train_v1.1.json

      curriculum build -d musique:10000 -d hotpotqa:5000 -i musique_train.jsonl -i hotpot_train.json

      curriculum build --setting distractor -d musique -i musique_ans_v1.0_dev.jsonl --n 1000 -o eval/musique
    """
    with reported_errors(_hint):
        _build(overrides, dataset=dataset, input=input, schedule=schedule, pieces=pieces, K=K, n=n, seed=seed,
               order=order, setting=setting, split=split, max_distractors=max_distractors, template=template,
               batch_prompts=batch_prompts, tail=tail, eval_set=eval_set, leakage=leakage,
               rows_per_shard=rows_per_shard, on_error=on_error, out_dir=out_dir,
               allow_split_mismatch=allow_split_mismatch, include_unanswerable=include_unanswerable, workers=workers,
               tokenizer=tokenizer, overwrite=overwrite, progress=progress)


def _hint(e: BaseException) -> str | None:
    from ..errors import DataError

    if isinstance(e, DataError):
        return "fix the record, or pass --on-error skip to skip bad records (they are counted and reported)"
    if isinstance(e, OSError):
        return "check --input and --out"
    return None


def _build(overrides: list[str] | None, *, dataset: list[str] | None, input: list[str] | None, schedule: Any,
           pieces: Any, K: Any, n: Any, seed: Any, order: Any, setting: Any, split: Any, max_distractors: Any,
           template: Any, batch_prompts: Any, tail: Any, eval_set: list[str] | None, leakage: Any,
           rows_per_shard: Any, on_error: Any, out_dir: Any, allow_split_mismatch: bool, include_unanswerable: bool,
           workers: Any, tokenizer: Any, overwrite: bool, progress: bool) -> None:
    from .. import curricula
    from .._recipes import compose

    overrides = list(overrides or [])
    recipe = None
    rest = []
    for o in overrides:
        if o.startswith("recipe="):
            recipe = o.split("=", 1)[1]
        elif "=" in o:
            rest.append(o)
        else:
            fail(f"unexpected argument {o!r}", "arguments are recipe=NAME or key=value overrides; options start with --")
    if rest and not recipe:
        fail("key=value overrides need a recipe", "add recipe=NAME (see `ls recipes/build`), or use --options")
    mapping = {"n": None}
    if recipe:
        try:
            mapping = compose("build", recipe, rest)
        except (FileNotFoundError, ValueError):
            raise
        except Exception as e:  # hydra's override grammar / interpolation errors
            raise ValueError(f"could not compose recipe {recipe!r}: {e}") from None

    # Command-line options win over the recipe.
    if dataset:
        if len(input or []) not in (0, len(dataset)):
            fail(f"{len(dataset)} --dataset but {len(input or [])} --input", "give one --input per --dataset, in order")
        specs = []
        for i, d in enumerate(dataset):
            name, _, quota = d.partition(":")
            specs.append({"dataset": name, "input": (input or [None] * len(dataset))[i],
                          "n": quota or (n if n is not None else mapping.get("n")), "split": split})
        recipe_dataset = mapping.pop("dataset", None)
        mapping.pop("input", None)
        mapping["sources"] = specs
        if recipe and K is None and mapping.get("K") is not None and {s["dataset"] for s in specs} != {recipe_dataset}:
            # the recipe's K belongs to its dataset: the paper's K of each --dataset applies instead
            console.print(f"[yellow]note:[/] recipe K={mapping['K']} is for {recipe_dataset}; using each --dataset's "
                          "own K (pass --K to set one)")
            mapping["K"] = None
    elif input:
        if len(input) != 1 or mapping.get("sources"):
            fail("--input without --dataset", "pass --dataset NAME for each --input")
        mapping["input"] = input[0]
    if n is not None and not dataset:
        mapping["n"] = n
        for src in mapping.get("sources") or []:  # a recipe's mixture: --n is per dataset
            src["n"] = n
    if split is not None and not dataset:
        mapping["split"] = split
        for src in mapping.get("sources") or []:
            src["split"] = split
    for key, val in (("schedule", schedule), ("pieces", pieces), ("K", K), ("seed", seed), ("order", order),
                     ("setting", setting), ("max_distractors", max_distractors), ("template", template),
                     ("batch_prompts", batch_prompts), ("tail", tail), ("leakage", leakage),
                     ("rows_per_shard", rows_per_shard), ("on_error", on_error), ("out", out_dir),
                     ("tokenizer", tokenizer)):
        if val is not None:
            mapping[key] = val
    if eval_set:
        mapping["eval_sets"] = list(eval_set)
    for flag, key in ((overwrite, "overwrite"), (allow_split_mismatch, "allow_split_mismatch"),
                      (include_unanswerable, "include_unanswerable")):
        if flag:
            mapping[key] = True
    if workers is not None:
        mapping["workers"] = workers
    if not mapping.get("dataset") and not mapping.get("sources"):
        fail("no dataset given", "pass --dataset NAME --input PATH, or recipe=NAME (e.g. recipe=musique-min-max)")
    cfg = config_from_mapping(mapping)  # every value checked here, flags and recipe alike
    if out_dir is None and not recipe:
        names = "+".join(s.dataset for s in cfg.sources)
        cfg.out = f"outputs/{names}-{cfg.schedule if cfg.setting == 'curriculum' else cfg.setting}"
    result = curricula.build_curriculum(cfg, progress=progress and console.is_terminal)
    from .data import print_shard_summary

    print_shard_summary(result.out, result.manifest)
    if result.manifest.get("prompt_tokens"):
        pt = result.manifest["prompt_tokens"]
        lg = pt["longest"]
        out.print(f"longest prompt: [bold]{lg['tokens']}[/] tokens with {escape(pt['tokenizer'])}'s chat template (row "
                  f"{lg['id']}, curriculum_index {lg['curriculum_index']}, level {lg['level']}); mean {pt['mean']}")
    out.print(f"[green]wrote[/] {result.rows} rows to [bold]{result.out}[/]")


def register(app: typer.Typer) -> None:
    app.command("build", context_settings={"help_option_names": ["-h", "--help"]})(build)
