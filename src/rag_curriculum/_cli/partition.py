"""`curriculum partition` (base-answerable / base-unanswerable by pass@k) and `curriculum partition-merge`.

    curriculum partition outputs/musique-max --model Qwen/Qwen2.5-7B-Instruct --pass-at 8 --balance \\
        --out outputs/musique-partition
    for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i curriculum partition outputs/musique-max \\
        --model Qwen/Qwen2.5-7B-Instruct --num-shards 8 --shard-index $i --out outputs/musique-partition & done; wait
    curriculum partition-merge node0/musique-partition node1/musique-partition --out outputs/musique-partition
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .common import (
    AllowIdenticalSamples,
    ApiKey,
    BackendArg,
    BaseUrl,
    BatchSize,
    Concurrency,
    Device,
    Dtype,
    GpuMemoryUtilization,
    MaxModelLen,
    TensorParallelSize,
    backend_args_for,
    console,
    out,
    parse_backend_args,
    redacted,
    reported_errors,
)


def partition(
    shards: Annotated[Path | None, typer.Argument(
        help="A shard directory made by `curriculum build` (normally --schedule max: the hardest level). Or give "
        "--dataset and --input to build one first.", show_default=False)] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Output directory: answerable/, unanswerable/, "
                                          "learnable/, stats.parquet, partition.json; work/ holds the resumable "
                                          "generation.")] = Path("outputs/partition"),
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Build from a dataset file first: "
                                                "hotpotqa | musique | 2wikimultihopqa.", show_default=False)] = None,
    input_file: Annotated[str | None, typer.Option("--input", "-i", help="The --dataset's source file; built at "
                                                   "level K (--schedule max) into OUT/input.",
                                                   show_default=False)] = None,
    n: Annotated[int | None, typer.Option("--n", "-n", help="With --input: questions to sample (RAG-RL: up to "
                                          "40,000). \\[default: all]", show_default=False)] = None,
    K: Annotated[int | None, typer.Option("--K", "-K", help="With --input: the level. \\[default: the dataset's K]",
                                          show_default=False)] = None,
    backend: Annotated[str, typer.Option(help="Generation backend: vllm (GPU, the paper's) | openai (a server "
                                         "such as `vllm serve`) | transformers (the CPU choice; GPU too) | "
                                         "scripted.")] = "vllm",
    model: Annotated[str | None, typer.Option("--model", "-M", help="Base model: a local path or Hub id; for "
                                              "--backend openai the served model's name; for scripted a JSON "
                                              "file or module:attr.", show_default=False)] = None,
    pass_at: Annotated[int, typer.Option("--pass-at", "-k", help="Samples per question, k (RAG-RL: 8; at most "
                                         "1024); pass@j is stored for every j <= k.")] = 8,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (use the rollout temperature).")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling top-p.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per completion (RAG-RL: 800).")] = 800,
    seed: Annotated[int, typer.Option(help="Seed: every question is sampled with a seed derived from it and the "
                                      "question id; also the --balance draw.")] = 0,
    max_model_len: MaxModelLen = None,
    tensor_parallel_size: TensorParallelSize = None,
    dtype: Dtype = None,
    gpu_memory_utilization: GpuMemoryUtilization = None,
    batch_size: BatchSize = None,
    device: Device = None,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
    concurrency: Concurrency = None,
    backend_arg: BackendArg = None,
    allow_identical_samples: AllowIdenticalSamples = False,
    correct_f1: Annotated[float, typer.Option(help="A sample is correct when its answer F1 reaches this "
                                              "(RAG-RL: 1).")] = 1.0,
    strict_format: Annotated[bool, typer.Option(help="Count only samples that keep the output format.")] = False,
    balance: Annotated[bool, typer.Option(help="Clip answerable/ and unanswerable/ to the same size with --seed "
                                          "(RAG-RL appendix A).")] = False,
    keep_completions: Annotated[bool, typer.Option(help="Add the raw completions (`base_completions`) to the "
                                                   "outputs and stats.parquet.")] = False,
    chunk_size: Annotated[int, typer.Option(help="Questions per resumable chunk (also the unit of sharding).")]
    = 256,
    chunks_per_call: Annotated[int | None, typer.Option(
        help="Chunks per backend call. \\[default: vllm 2048 prompts per call, transformers 1 chunk]",
        show_default=False)] = None,
    question_seeds: Annotated[bool, typer.Option(
        help="Seed each question from (--seed, id) so resumed and sharded runs draw the same samples. "
        "--no-question-seeds is faster on vLLM but not reproducible.")] = True,
    num_shards: Annotated[int, typer.Option(help="Split the questions over N processes (one per GPU or node).")]
    = 1,
    shard_index: Annotated[int, typer.Option(help="Which of the --num-shards this process runs (0-based).")] = 0,
    max_chunks: Annotated[int | None, typer.Option(help="Stop after generating this many chunks (run again to "
                                                   "continue).", show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option(help="Discard what --out holds from a run with other settings (without "
                                            "--num-shards, also start the same run again; a shard never discards "
                                            "the chunks other shards of its run wrote).")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Partition questions by what a base model can answer (RAG-RL 3.2, appendix A): sample k completions per
    question, score each final answer by F1, and write answerable/ (some sample has F1 = 1), unanswerable/ (none),
    learnable/ (0 < c < k), and stats.parquet (n, c, every sample's F1, pass@j for j <= k).

    Resumable: results are flushed in chunks; after a crash or kill, run the same command again. Scale out with
    --num-shards N --shard-index I (one process per GPU, CUDA_VISIBLE_DEVICES=I); processes sharing --out write
    the outputs when the last one finishes; directories from separate machines are joined with
    `curriculum partition-merge`. Running again with other --balance / --correct-f1 / --strict-format re-buckets
    without generating."""
    from ..curricula.builder import current_command
    from ..partition import PartitionConfig
    from ..partition import partition as run_partition

    flags = {"tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len, "dtype": dtype,
             "gpu_memory_utilization": gpu_memory_utilization, "batch_size": batch_size, "device": device,
             "base_url": base_url, "api_key": api_key, "concurrency": concurrency}
    args = backend_args_for(backend, flags, parse_backend_args(backend_arg))
    with reported_errors():
        if max_chunks is not None:
            from .._settings import MAX_COUNT, check_value

            check_value("max_chunks", max_chunks, int, {"ge": 1, "le": MAX_COUNT}, flag="--max-chunks")
        cfg = PartitionConfig(
            shards=str(shards) if shards else None, dataset=dataset, input=input_file, n=n, K=K, out=str(out_dir),
            backend=backend, model=model, backend_args=args, k=pass_at, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, seed=seed, correct_f1=correct_f1, strict_format=strict_format, balance=balance,
            keep_completions=keep_completions, chunk_size=chunk_size, chunks_per_call=chunks_per_call,
            question_seeds=question_seeds, num_shards=num_shards, shard_index=shard_index, overwrite=overwrite,
            allow_identical_samples=allow_identical_samples)
        cfg.validate()
        cfg.check_model()  # a mistyped path stops here, not deep inside the model loader
        result = run_partition(cfg, command=redacted(current_command()), progress=progress and console.is_terminal,
                               max_chunks=max_chunks)
    if not result.complete:
        rep = result.run
        left = len(rep.remaining) if rep else 0
        what = (f"stopped with {left} chunk(s) of this shard left: run the same command again to continue" if left
                else f"shard {shard_index} of {num_shards} is done; the outputs are written when every shard is "
                "(processes sharing --out do it themselves; join directories of other machines with "
                "`curriculum partition-merge`)")
        if rep is not None:
            console.print(f"generated {rep.generated_questions:,} question(s), {rep.completions:,} completions in "
                          f"{rep.seconds:,.1f}s ({rep.completions_per_second:,.1f} completions/s)")
        console.print(f"[yellow]{what}[/]")
        return
    print_summary(result)


def print_summary(result: Any) -> None:
    from rich.table import Table

    s = result.summary or {}
    c = s.get("counts", {})
    n = c.get("samples_per_question", 0)
    scored = max(c.get("scored", 0), 1)
    gen = (s.get("generation") or {}).get("fingerprint", {}).get("generation", {})
    t = Table(title=f"partition of {s.get('input', {}).get('path')} by {gen.get('model')} (pass@{n})",
              title_justify="left")
    t.add_column("")
    t.add_column("questions", justify="right")
    t.add_column("share", justify="right")
    t.add_row("questions", f"{c.get('questions', 0):,}", "")
    if c.get("skipped"):
        t.add_row("skipped (prompt too long)", f"{c['skipped']:,}", "")
    for key, label in (("answerable", "base-answerable (c > 0)"), ("unanswerable", "base-unanswerable (c = 0)"),
                       ("learnable", "learnable (0 < c < n)")):
        t.add_row(label, f"{c.get(key, 0):,}", f"{c.get(key, 0) / scored:.1%}")
    bal = s.get("balance") or {}
    if bal.get("enabled"):
        t.add_row("kept per bucket (--balance)", f"{bal.get('size', 0):,}", "")
    pak = c.get("mean_pass_at_k") or {}
    if pak:
        t.add_row("mean pass@1", f"{pak.get('1') or 0:.4f}", "")
        t.add_row(f"mean pass@{n}", f"{pak.get(str(n)) or 0:.4f}", "")
    if c.get("format_valid_rate") is not None:
        t.add_row("samples in the output format", "", f"{c['format_valid_rate']:.1%}")
    out.print(t)
    rep = result.run
    if rep is not None and rep.generated_chunks:
        console.print(f"generated {rep.generated_questions:,} question(s), {rep.completions:,} completions in "
                      f"{rep.seconds:,.1f}s ({rep.completions_per_second:,.1f} completions/s)")
    elif rep is not None:
        console.print("every chunk was already generated; outputs re-written from work/")
    outputs = s.get("outputs") or {}
    console.print(f"[green]done:[/] {result.out}/ " + ", ".join(f"{k}/ ({v['rows']:,} rows)"
                                                                for k, v in outputs.items()) + ", stats.parquet")


def partition_merge(
    dirs: Annotated[list[Path], typer.Argument(help="The --out directories of the shard runs (one run, several "
                                               "machines). One directory re-writes its outputs.",
                                               show_default=False)],
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the joined outputs. "
                                                 "\\[default: the first directory]", show_default=False)] = None,
    shards: Annotated[Path | None, typer.Option("--shards", help="The input shard directory, when it is no longer "
                                                "where the runs recorded it.", show_default=False)] = None,
    balance: Annotated[bool | None, typer.Option("--balance/--no-balance", help="Override the run's --balance.",
                                                 show_default=False)] = None,
    correct_f1: Annotated[float | None, typer.Option(help="Override the run's --correct-f1.",
                                                     show_default=False)] = None,
    strict_format: Annotated[bool | None, typer.Option("--strict-format/--no-strict-format",
                                                       help="Override the run's --strict-format.",
                                                       show_default=False)] = None,
    keep_completions: Annotated[bool | None, typer.Option("--keep-completions/--no-keep-completions",
                                                          help="Override the run's --keep-completions.",
                                                          show_default=False)] = None,
) -> None:
    """Join the work directories of a partition run that was sharded over several machines (copying each one's
    finished chunks into --out) and write answerable/, unanswerable/, learnable/ and stats.parquet. Output
    options can be changed here without generating again."""
    from ..curricula.builder import current_command
    from ..partition import merge_partitions

    options = {k: v for k, v in {"balance": balance, "correct_f1": correct_f1, "strict_format": strict_format,
                                 "keep_completions": keep_completions}.items() if v is not None}
    with reported_errors():
        result = merge_partitions(dirs, out=out_dir, shards=shards, command=current_command(), **options)
    print_summary(result)


def register(app: typer.Typer) -> None:
    """Add `curriculum partition` and `curriculum partition-merge` to the `curriculum` app."""
    app.command("partition")(partition)
    app.command("partition-merge")(partition_merge)
