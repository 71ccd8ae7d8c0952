"""CRAFT (docs/craft.md): five trace formats, their rewards and their faithfulness judge.

* the formats ``craft-v1`` ... ``craft-v5``: :data:`CRAFT_VARIANTS` (the tags of each, Table 11), their prompt
  templates and :func:`parse_craft` (the strict parser, with Table 12's error taxonomy as :data:`CRAFT_REASONS`),
  :func:`cited_documents`;
* the rewards (section 3.3, Eqs. 2-7): :class:`CraftReward` (``"craft"``, with ``"craft-format"``,
  ``"craft-answer"``, ``"craft-evidence"``, ``"craft-boundary"``, ``"craft-judge"``), :func:`boundary_check`;
* the judge (Algorithm 1): :class:`CraftJudge`, four binary checks through any generation backend, cached on disk;
* the evaluation's side (``curriculum eval --template craft-vN [--judge ...]``): :func:`rerender` (a set in a trace
  format), :func:`make_judge`, :func:`add_craft_scores` (evidence F1, the boundary check, faithfulness per sample),
  :func:`craft_entry` and :func:`render_variants_table` (the per-variant table laid out like the paper's Table 2).

Importing this package registers the templates, output formats and rewards by name (nothing loads until one is
asked for).

>>> from rag_curriculum.rewards import get_format
>>> get_format("craft-v2").parse("<gold_docs>[1]</gold_docs><reason>d1</reason><answer>Rome</answer>").answer
'Rome'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._plumbing import lazy_exports
from ...prompts import TEMPLATES
from ...rewards import EVAL_SCORERS, FORMATS, register_reward

__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._evaluation import (
        CRAFT_FIELDS,
        EVAL_SCORER,
        add_craft_scores,
        craft_entry,
        craft_variant_of,
        make_judge,
        render_variants_table,
        rerender,
        result_schema,
    )
    from ._format import CRAFT_REASONS, CRAFT_VARIANTS, CraftParse, cited_documents, parse_craft
    from ._judge import CraftJudge
    from ._reward import (
        CraftAnswerReward,
        CraftBoundaryReward,
        CraftBreakdown,
        CraftEvidenceReward,
        CraftFormatReward,
        CraftJudgeReward,
        CraftReward,
        boundary_check,
    )

for _v in range(1, 6):  # the trace formats: a prompt template and the parser of its completions
    TEMPLATES.register(f"craft-v{_v}", f"{__name__}._format:CRAFT_V{_v}_TEMPLATE")
    FORMATS.register(f"craft-v{_v}", f"{__name__}._format:CRAFT_V{_v}_FORMAT")
# the total and each term
for _name, _cls in (("craft", "CraftReward"), ("craft-format", "CraftFormatReward"),
                    ("craft-answer", "CraftAnswerReward"), ("craft-evidence", "CraftEvidenceReward"),
                    ("craft-boundary", "CraftBoundaryReward"), ("craft-judge", "CraftJudgeReward")):
    register_reward(_name, f"{__name__}._reward:{_cls}")
# its part of `curriculum eval`: trace formats re-rendered, judged, scored and tabled
EVAL_SCORERS.register("craft", f"{__name__}._evaluation:EVAL_SCORER")

__all__ = [
    "CRAFT_FIELDS",
    "CRAFT_REASONS",
    "CRAFT_VARIANTS",
    "EVAL_SCORER",
    "CraftAnswerReward",
    "CraftBoundaryReward",
    "CraftBreakdown",
    "CraftEvidenceReward",
    "CraftFormatReward",
    "CraftJudge",
    "CraftJudgeReward",
    "CraftParse",
    "CraftReward",
    "add_craft_scores",
    "boundary_check",
    "cited_documents",
    "craft_entry",
    "craft_variant_of",
    "make_judge",
    "parse_craft",
    "render_variants_table",
    "rerender",
    "result_schema",
]
