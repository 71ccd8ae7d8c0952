"""The partition's data card is the template ``data_cards/partition.md`` (rendered by ``rag_curriculum.cards``), and
it renders the same bytes as the card ``partition._write_card`` built in code before (kept here as the oracle),
for every optional paragraph on and off."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rag_curriculum.cards import front_matter, md_table, template_path, write_partition_card
from rag_curriculum.difficulty.accuracy import ANSWERABLE, LEARNABLE, UNANSWERABLE

PASS_RATE_PLOT = "pass_rate.png"


def card_in_code(manifest: Mapping[str, Any], bucket: str, plot: bytes | None) -> str:
    """The card as ``partition._write_card`` built it in code before the template (verbatim but for the plot file
    and the return): the oracle the template must match byte for byte."""
    part = manifest["partition"]
    counts = part["counts"]
    gen = manifest["generation"]
    g = gen["fingerprint"]["generation"]
    sampling = gen["sampling"]
    n = sampling["n"]
    sources = sorted(manifest["counts"]["sources"]) or [s["dataset"] for s in manifest.get("sources", [])]
    model = g.get("model") or "?"
    pretty = {ANSWERABLE: "base-answerable", UNANSWERABLE: "base-unanswerable", LEARNABLE: "learnable"}[bucket]
    title = f"RAG-RL {pretty} questions ({', '.join(sources) or '?'}, {Path(str(model)).name}, pass@{n})"
    lines = [front_matter(sources=sources, num_rows=manifest["num_rows"], pretty_name=title,
                          tags=("pass-at-k", "accuracy-based-difficulty"), shards=manifest.get("shards")),
             f"# {title}", ""]
    lines += [
        f"{manifest['num_rows']:,} rows: the questions of `{manifest['input']['path']}` for which {part['rule']}. "
        f"Each question was answered {n} times by `{model}` ({g.get('backend')} backend; temperature "
        f"{sampling['temperature']}, top-p {sampling['top_p']}, at most {sampling['max_tokens']} tokens, seed "
        f"{sampling['seed']}); each final answer was scored by answer F1 against the gold answer and its aliases "
        "(RAG-RL section 3.2, appendix A). Rows keep the input's columns and order (`curriculum_index` is "
        "renumbered; `input_index` is the input position) and add `n`, `c` (samples with F1 = 1), `sample_f1`, "
        "`max_f1`, `mean_f1`, `pass_rate` (c/n: c correct of the n = --pass-at samples), `pass_at_k` (unbiased "
        "pass@j for j = 1..n) and "
        "`num_valid_format`.", ""]
    bal = part["balance"]
    if bal["enabled"] and bucket != LEARNABLE:
        lines += [f"Balanced as in the paper: {bal['answerable_before']:,} answerable and "
                  f"{bal['unanswerable_before']:,} unanswerable questions were clipped to {bal['size']:,} each "
                  f"with seed {manifest['seed']}.", ""]
    lines += ["## How it was made", "", "```", str(manifest.get("command")), "```", ""]
    lines += ["## All partitioned questions", "", md_table(["", "questions"], [
        ["questions", f"{counts['questions']:,}"], ["skipped (prompt too long)", f"{counts['skipped']:,}"],
        ["base-answerable (c > 0)", f"{counts[ANSWERABLE]:,}"],
        ["base-unanswerable (c = 0)", f"{counts[UNANSWERABLE]:,}"],
        ["learnable (0 < c < k)", f"{counts[LEARNABLE]:,}"]]), ""]
    scored = max(counts["scored"], 1)
    lines += ["Distribution of pass rates (c correct samples out of k):", "", md_table(
        ["c", "pass rate c/k", "questions", "share"],
        [[c, f"{int(c) / n:.3f}", f"{q:,}", f"{q / scored:.1%}"]
         for c, q in counts["correct_samples_histogram"].items()]), ""]
    lines += ["Mean unbiased pass@k over the questions:", "", md_table(
        ["k", "pass@k"], [[k, "-" if v is None else f"{v:.4f}"] for k, v in counts["mean_pass_at_k"].items()]), ""]
    if counts.get("format_valid_rate") is not None:
        lines += [f"Samples that keep the output format: {counts['format_valid_rate']:.1%}. Mean max F1: "
                  f"{counts['mean_max_f1']:.4f}.", ""]
    if plot is not None:
        lines += [f"![distribution of pass rates]({PASS_RATE_PLOT})", ""]
    rc = manifest["counts"]
    lines += ["## This set", "", "Rows per hops:", "", md_table(["hops", "rows"], rc["hops"].items()), "",
              "Rows per level:", "", md_table(["level", "rows"], rc["levels"].items()), ""]
    if manifest.get("trainer_tail"):
        t = manifest["trainer_tail"]
        lines += [f"With {t['batch_prompts']} prompts per optimiser step a trainer runs {t['steps']} steps and "
                  f"never sees the last {t['unseen_rows']} row(s).", ""]
    lines += ["The per-question statistics of every partitioned question are in `../stats.parquet`.", ""]
    return "\n".join(lines)


def manifest(*, balance: bool, format_valid: bool, tail: bool, skipped: int = 0) -> dict[str, Any]:
    counts = {"questions": 12, "scored": 12 - skipped, "skipped": skipped, "samples_per_question": 4,
              ANSWERABLE: 7, UNANSWERABLE: 5, LEARNABLE: 5,
              "correct_samples_histogram": {"0": 5, "1": 2, "2": 2, "3": 1, "4": 2},
              "mean_pass_at_k": {"1": 0.354167, "2": 0.5, "3": 0.55, "4": None},
              "mean_max_f1": 0.6875 if format_valid else None, "format_valid_rate": 0.979167 if format_valid else None}
    return {
        "num_rows": 1_234, "seed": 7, "command": "curriculum partition ../max --backend vllm --model m $HOME",
        "input": {"path": "../musique-max"},
        "sources": [{"dataset": "musique"}],
        "counts": {"sources": {"musique": 1_000, "hotpotqa": 234}, "hops": {"2": 1_000, "3": 234},
                   "levels": {"20": 1_234}},
        "generation": {"fingerprint": {"generation": {"model": "/models/Qwen2.5-7B-Instruct", "backend": "vllm"}},
                       "sampling": {"n": 4, "temperature": 1.0, "top_p": 0.95, "max_tokens": 800, "seed": 0}},
        "partition": {"rule": "some sample has answer F1 = 1 (c > 0)", "counts": counts,
                      "balance": {"enabled": balance, "answerable_before": 7, "unanswerable_before": 5,
                                  **({"size": 5} if balance else {})}},
        "trainer_tail": {"batch_prompts": 64, "steps": 19, "unseen_rows": 18} if tail else None,
    }


CASES = list(itertools.product((ANSWERABLE, UNANSWERABLE, LEARNABLE), (False, True), (False, True), (False, True),
                               (False, True)))


@pytest.mark.parametrize(("bucket", "balance", "format_valid", "tail", "plot"), CASES)
def test_the_template_renders_the_card_built_in_code(tmp_path, bucket, balance, format_valid, tail, plot):
    m = manifest(balance=balance, format_valid=format_valid, tail=tail, skipped=3 if tail else 0)
    write_partition_card(tmp_path, m, bucket, plot=PASS_RATE_PLOT if plot else None)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == card_in_code(m, bucket, b"png" if plot else None)


def test_the_template_ships_in_data_cards():
    path = template_path("partition.md")
    assert path.is_file() and path.parent.name == "data_cards"
    assert "$front_matter" in path.read_text(encoding="utf-8")
    assert len(CASES) == 48


def test_a_gguf_model_is_named_with_its_digest(tmp_path):
    """Records name a model file outside the output by its name only (no absolute path is written): the card gives
    its SHA-256 beside it, so the recorded command can be run again with the right file."""
    m = manifest(balance=False, format_valid=True, tail=False)
    digest = "ab" * 32
    m["generation"]["fingerprint"]["generation"].update(
        model="gemma-3-270m-q4_k_m.gguf",
        model_file={"model": "gemma-3-270m-q4_k_m.gguf", "gguf_sha256": digest, "converted_to": "gguf-abababab"})
    write_partition_card(tmp_path, m, ANSWERABLE)
    text = " ".join((tmp_path / "README.md").read_text(encoding="utf-8").split())
    assert (f"The model was the GGUF file `gemma-3-270m-q4_k_m.gguf` with SHA-256 `{digest}`; records name a file "
            "outside this folder by its name only, so to run the command below again, give the path of the file "
            "with that digest.") in text
    # as a partition run records it: the backend's identity, the file's digest under files
    m = manifest(balance=False, format_valid=True, tail=False)
    m["generation"]["fingerprint"]["generation"].update(model="gemma-3-270m-q4_k_m.gguf", files={"model": digest})
    (tmp_path / "files").mkdir()
    write_partition_card(tmp_path / "files", m, ANSWERABLE)
    assert f"SHA-256 `{digest}`" in (tmp_path / "files" / "README.md").read_text(encoding="utf-8")
    plain = tmp_path / "plain"
    plain.mkdir()
    write_partition_card(plain, manifest(balance=False, format_valid=True, tail=False), ANSWERABLE)
    assert "SHA-256" not in (plain / "README.md").read_text(encoding="utf-8")
