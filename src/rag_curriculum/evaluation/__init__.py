"""Evaluation: answer, citation and joint F1 of models on evaluation sets, in the distractor and ideal-retrieval
settings (RAG-RL section 4.5), with breakdowns, Markdown tables laid out like the paper's, plots, and the
comparison of runs. ``curriculum eval`` is the command; :func:`run_eval` is what it calls.

Importing this package never imports torch, transformers or vllm (the generation backend does, when built).

>>> cfg = EvalConfig(models=[ModelSpec.parse("base=Qwen/Qwen2.5-7B-Instruct")], data=["outputs/eval/musique-distractor"])
>>> cfg.m, cfg.models[0].name
(3, 'base')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports, moved_names

# The names imported under TYPE_CHECKING below load on first use (the command line imports the configs without
# pyarrow, numpy or matplotlib).
_lazy, __dir__ = lazy_exports(__name__, globals())
# VERITAS's table moved to rag_curriculum.methods.veritas: imported from here for one release, with a warning
__getattr__ = moved_names(__name__, {"veritas_table": "rag_curriculum.methods.veritas"}, _lazy)

if TYPE_CHECKING:  # for type checkers and IDEs
    from ..errors import EvalError
    from ._agent import AgentEvalConfig, endings, format_errors, run_agent_eval, table_rows
    from ._config import EvalConfig, ModelSpec
    from ._plots import plot_by_hops, plot_by_level, plot_overview, write_plots
    from ._report import (
        SUMMARY_KIND,
        ZERO_MARK,
        ZERO_WHY,
        compare_summaries,
        load_summary,
        main_table,
        paired_across_runs,
        paired_comparisons,
        paired_table,
        render_report,
        render_table,
        summarize_entry,
        zero_notes,
    )
    from ._run import (
        RESULT_SCHEMA,
        EvalResult,
        EvalSet,
        generate_completions,
        load_buckets,
        load_eval_sets,
        read_results,
        run_eval,
    )
    from ._scoring import (
        METRICS,
        SAMPLE_METRICS,
        breakdown,
        breakdown_by_format,
        format_reasons,
        paired_difference,
        score_row,
        summarize,
        summarize_samples,
    )

__all__ = [
    "AgentEvalConfig",
    "METRICS",
    "RESULT_SCHEMA",
    "SAMPLE_METRICS",
    "SUMMARY_KIND",
    "ZERO_MARK",
    "ZERO_WHY",
    "EvalConfig",
    "EvalError",
    "EvalResult",
    "EvalSet",
    "ModelSpec",
    "breakdown",
    "breakdown_by_format",
    "compare_summaries",
    "endings",
    "format_errors",
    "format_reasons",
    "generate_completions",
    "load_buckets",
    "load_eval_sets",
    "load_summary",
    "main_table",
    "paired_across_runs",
    "paired_comparisons",
    "paired_difference",
    "paired_table",
    "plot_by_hops",
    "plot_by_level",
    "plot_overview",
    "read_results",
    "render_report",
    "render_table",
    "run_agent_eval",
    "run_eval",
    "score_row",
    "summarize",
    "summarize_entry",
    "summarize_samples",
    "table_rows",
    "write_plots",
    "zero_notes",
]
