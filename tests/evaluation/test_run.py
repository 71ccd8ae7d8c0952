"""`run_eval` and `curriculum eval` end to end with scripted completions, on evaluation sets built from
../shared/data: the summary against closed-form expectations and against the per-question results, resume,
re-scoring without generation, refusal of changed settings, and `curriculum eval compare`."""

from __future__ import annotations

import json
from fractions import Fraction as F
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import HOTPOT_HUB, MUSIQUE_DEV
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.evaluation import (
    EvalConfig,
    EvalError,
    ModelSpec,
    compare_summaries,
    load_summary,
    read_results,
    render_table,
    run_eval,
)
from rag_curriculum.generation import SamplingConfig
from rag_curriculum.shards import read_rows


class ByPrompt:
    """Scripted completions, looked up by the prompt's user message. Sample j of every question is:
    0 - right answer, every gold label cited (answer F1 1, citation F1 1);
    1 - a wrong answer citing only the first gold label (answer F1 0, citation F1 2 / (hops + 1));
    2 - the right answer without the format (invalid: answer F1 1, citation F1 0); then again from 0."""

    name = "by-prompt"
    calls: list[int] = []  # prompts per generate() call, across instances (reset by tests)

    def __init__(self, model: str = "", rows: dict | None = None, fail_after: int | None = None, **_: object):
        self.rows = rows if rows is not None else ROWS_BY_PROMPT
        self.fail_after = fail_after

    def generate(self, prompts, sampling):
        if self.fail_after is not None and len(ByPrompt.calls) >= self.fail_after:
            raise RuntimeError("simulated crash")
        ByPrompt.calls.append(len(prompts))
        out = []
        for p in prompts:
            row = self.rows[p[-1]["content"]]
            answer, gold = row["answers"][0], row["gold_labels"]
            kinds = [
                f"<reasoning>\nok\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: "
                f"{', '.join(gold)}\n</answer>",
                f"<reasoning>\nok\n</reasoning>\n<answer>\nFinal answer: zzzq\nSupporting passages: {gold[0]}\n</answer>",
                f"Final answer: {answer}",
            ]
            out.append([kinds[j % 3] for j in range(sampling.n)])
        return out

    def close(self):
        pass


ROWS_BY_PROMPT: dict[str, dict] = {}


def _prompt_key(row: dict) -> str:
    return row["prompt"][-1]["content"]  # the user message: passages and question (a question may repeat)


@pytest.fixture(scope="module")
def eval_sets(tmp_path_factory, shared_data) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-sets")
    dirs = {}
    for name, dataset, path, n, setting in [("musique-distractor", "musique", MUSIQUE_DEV, 7, "distractor"),
                                            ("musique-ideal", "musique", MUSIQUE_DEV, 7, "ideal"),
                                            ("hotpotqa-distractor", "hotpotqa", HOTPOT_HUB, 5, "distractor")]:
        build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(path), n=n)], setting=setting,
                                     out=str(root / name)), command="test")
        dirs[name] = root / name
        for r in read_rows(root / name):
            ROWS_BY_PROMPT[_prompt_key(r)] = r
    return dirs


@pytest.fixture
def stats_file(tmp_path, eval_sets) -> Path:
    rows = read_rows(eval_sets["musique-distractor"])
    table = pa.table({"id": [r["id"] for r in rows], "data_source": [r["data_source"] for r in rows],
                      "source_id": [r["source_id"] for r in rows],
                      "bucket": ["answerable" if i % 3 == 0 else "unanswerable" for i in range(len(rows))]})
    p = tmp_path / "partition" / "stats.parquet"
    p.parent.mkdir()
    pq.write_table(table, p)
    return p.parent


def expected(rows: list[dict], m: int) -> dict:
    """Closed-form aggregate of ByPrompt's completions over ``rows``."""
    a = c = jps = F(0)
    for r in rows:
        per = [(F(1), F(1)), (F(0), F(2, r["hops"] + 1)), (F(1), F(0))]
        samples = [per[j % 3] for j in range(m)]
        a += sum(s[0] for s in samples) / m
        c += sum(s[1] for s in samples) / m
        jps += sum(2 * x * y / (x + y) if x + y else 0 for x, y in samples) / m
    n = len(rows)
    a, c, jps = a / n, c / n, jps / n
    return {"answer_f1": a, "citation_f1": c, "joint_f1": 2 * a * c / (a + c), "joint_f1_per_sample": jps,
            "format_valid": F(sum(1 for j in range(m) if j % 3 != 2), m)}


def run(eval_sets, out, *, m=3, backend=None, **kw):
    cfg = EvalConfig(models=[ModelSpec.parse("base=org/base"), ModelSpec.parse("tuned=runs/x/checkpoint-9")],
                     data=[str(d) for d in eval_sets.values()], out=str(out), m=m, chunk_size=3, **kw)
    return run_eval(cfg, backend_factory=backend or (lambda model: ByPrompt()))


@pytest.mark.slow
def test_summary_matches_closed_form_and_results(eval_sets, stats_file, tmp_path):
    ByPrompt.calls = []
    res = run(eval_sets, tmp_path / "run", stats=[str(stats_file)])
    out = res.out
    assert res.generated == 2 * (7 + 7 + 5)
    summary = load_summary(out)
    assert summary == json.loads(json.dumps(res.summary))
    assert len(summary["evals"]) == 6  # 2 models x 3 evaluation sets
    assert {(e["model"], e["dataset"], e["setting"]) for e in summary["evals"]} == {
        (m, d, s) for m in ("base", "tuned") for d, s in [("musique", "distractor"), ("musique", "ideal"),
                                                          ("hotpotqa", "distractor")]}
    for e in summary["evals"]:
        path = out / e["results"]
        assert path == out / "results" / e["model"] / f"{e['dataset']}-{e['setting']}.parquet"
        table, meta = read_results(path)
        recs = table.to_pylist()
        rows = read_rows(eval_sets[f"{e['dataset']}-{e['setting']}"])
        assert [r["id"] for r in recs] == [r["id"] for r in rows] and e["n_questions"] == len(rows)
        assert meta["generation"]["sampling"]["n"] == 3 and e["m"] == 3
        assert all(len(r["completions"]) == 3 for r in recs)
        want = expected(rows, 3)
        for k, v in want.items():
            assert e["overall"][k] == pytest.approx(float(v), abs=1e-12), (e["model"], e["dataset"], k)
        # the summary against the per-question results file
        n = len(recs)
        a = sum(r["answer_f1"] for r in recs) / n
        c = sum(r["citation_f1"] for r in recs) / n
        assert e["overall"]["answer_f1"] == pytest.approx(a) and e["overall"]["citation_f1"] == pytest.approx(c)
        assert e["overall"]["joint_f1"] == pytest.approx(2 * a * c / (a + c))
        assert e["overall"]["exact_match"] == pytest.approx(sum(r["exact_match"] for r in recs) / n)
        assert e["overall"]["n_samples"] == 3 * n
        for hops, b in e["by_hops"].items():
            sub = [r for r in rows if str(r["hops"]) == hops]
            assert b["n_questions"] == len(sub)
            assert b["citation_f1"] == pytest.approx(float(expected(sub, 3)["citation_f1"]))
        assert sum(b["n_questions"] for b in e["by_level"].values()) == n
        assert e["by_format"]["invalid"]["n_samples"] == n and e["by_format"]["valid"]["n_samples"] == 2 * n
        assert e["by_format"]["invalid"]["citation_f1"] == 0.0
        assert e["format_reasons"] == {"missing_tag": n}
        if e["dataset"] == "musique":
            buckets = e["by_bucket"]
            assert buckets["answerable"]["n_questions"] == 3 and buckets["unanswerable"]["n_questions"] == 4
            assert {r["bucket"] for r in recs} == {"answerable", "unanswerable"}
        else:
            assert "by_bucket" not in e and {r["bucket"] for r in recs} == {None}
    table_md = (out / "table.md").read_text()
    assert "| Eval setting | Model | HotpotQA Answer F1 | HotpotQA Citation F1 | HotpotQA Joint F1 | MuSiQue Answer F1" \
        in table_md
    assert "| Distractor | base |" in table_md and "| Ideal Retrieval | base |" in table_md
    assert "## Base-answerable / base-unanswerable questions" in table_md and "2-hop Joint F1" in table_md
    plots = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert set(summary["plots"]) == {f"plots/{p}" for p in plots}
    assert {"overview-distractor.png", "overview-ideal.png", "by_hops-musique-distractor.png"} <= set(plots)
    assert not (out / "work").exists()
    assert json.loads((out / "eval_config.json").read_text())["config"]["m"] == 3


@pytest.mark.slow
def test_resume_after_a_crash_generates_only_what_is_missing(eval_sets, tmp_path):
    ByPrompt.calls = []
    sets = {"musique-distractor": eval_sets["musique-distractor"]}
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(sets, tmp_path / "run", backend=lambda model: ByPrompt(fail_after=2))
    assert ByPrompt.calls == [3, 3]  # two chunks of the first model done before the crash
    assert len(list((tmp_path / "run" / "work" / "base" / "musique-distractor").glob("chunk-*"))) == 2
    ByPrompt.calls = []
    res = run(sets, tmp_path / "run")
    assert ByPrompt.calls == [1, 3, 3, 1]  # base: the last chunk only; tuned: everything
    assert res.generated == 1 + 7
    assert not (tmp_path / "run" / "work").exists()
    first = res.summary
    made: list[str] = []
    res = run(sets, tmp_path / "run", backend=lambda model: made.append(model.name))
    assert made == [] and res.generated == 0  # nothing left to generate: no model is loaded
    assert res.summary["evals"] == first["evals"]


@pytest.mark.slow
def test_rescoring_needs_no_generation_and_changed_sampling_is_refused(eval_sets, tmp_path):
    sets = {"musique-ideal": eval_sets["musique-ideal"]}
    lenient = run(sets, tmp_path / "run").summary["evals"][0]["overall"]
    never = lambda model: pytest.fail("should not generate")  # noqa: E731
    strict = run(sets, tmp_path / "run", strict_format=True, backend=never).summary["evals"][0]["overall"]
    assert strict["answer_f1"] == pytest.approx(lenient["answer_f1"] - 1 / 3)  # the invalid third sample -> 0
    with pytest.raises(EvalError, match="other generation settings.*sampling"):
        run(sets, tmp_path / "run", temperature=0.5, backend=never)
    ByPrompt.calls = []
    run(sets, tmp_path / "run", temperature=0.5, overwrite=True)
    assert sum(ByPrompt.calls) == 2 * 7


def test_bad_inputs(eval_sets, tmp_path, shared_data):
    cur = tmp_path / "curriculum"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), n=3)], out=str(cur),
                                 allow_split_mismatch=True), command="test")
    with pytest.raises(EvalError, match="not an evaluation set"):
        run({"c": cur}, tmp_path / "r1")
    with pytest.raises(EvalError, match="same dataset and setting"):
        run({"a": eval_sets["musique-ideal"], "b": eval_sets["musique-ideal"]}, tmp_path / "r2")
    with pytest.raises(ValueError, match="share the name"):
        EvalConfig(models=[ModelSpec.parse("a/x"), ModelSpec.parse("b/x")], data=["d"]).validate()
    with pytest.raises(ValueError, match="no model"):
        EvalConfig(data=["d"]).validate()


def test_model_names():
    assert ModelSpec.parse("mm=outputs/mm") == ModelSpec("mm", "outputs/mm")
    assert ModelSpec.parse("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B-Instruct"
    assert ModelSpec.parse("runs/linear/checkpoint-120").name == "linear-checkpoint-120"
    with pytest.raises(ValueError, match="letters, digits"):
        ModelSpec("a b", "x")


@pytest.mark.slow
def test_compare_and_cli(eval_sets, tmp_path, stats_file):
    sets = {k: eval_sets[k] for k in ("musique-distractor", "musique-ideal")}
    run(sets, tmp_path / "run-a", stats=[str(stats_file)])
    run(sets, tmp_path / "run-b", m=2)
    merged = compare_summaries([tmp_path / "run-a", tmp_path / "run-b"])
    models = [e["model"] for e in merged["evals"]]
    assert models.count("run-a/base") == 2 and models.count("run-b/tuned") == 2
    assert merged["sampling"] is None  # the runs sampled differently
    md = render_table(merged)
    assert md.count("| run-a/base |") == 2 and "**" in md

    # the toolkit's scripted backend, from a JSON script {user message: completions} written by ByPrompt
    rows = read_rows(sets["musique-ideal"])
    script = tmp_path / "script.json"
    by_prompt = ByPrompt()
    script.write_text(json.dumps({_prompt_key(r): c for r, c in zip(
        rows, by_prompt.generate([r["prompt"] for r in rows], SamplingConfig(n=2)), strict=True)}))
    runner = CliRunner()
    cli = ["--model", f"one={script}", "--data", str(sets["musique-ideal"]), "--backend", "scripted", "--samples",
           "2", "--out", str(tmp_path / "cli"), "--no-plots"]
    res = runner.invoke(app, ["eval", *cli])
    assert res.exit_code == 0, res.output
    assert "Ideal Retrieval" in res.output and "MuSiQue" in res.output
    e = load_summary(tmp_path / "cli")["evals"][0]
    assert e["m"] == 2 and e["overall"]["answer_f1"] == pytest.approx(0.5)
    assert e["overall"]["citation_f1"] == pytest.approx(float(expected(rows, 2)["citation_f1"]))
    res = runner.invoke(app, ["eval", "run", *cli])
    assert res.exit_code == 0 and "reused every completion" in res.output, res.output
    res = runner.invoke(app, ["eval", "compare", str(tmp_path / "run-a"), str(tmp_path / "cli"),
                              "--out", str(tmp_path / "cmp" / "compare.md"), "--plots", str(tmp_path / "cmp" / "img")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| Ideal Retrieval |" in text and "](img/overview-ideal.png)" in text
    assert (tmp_path / "cmp" / "img" / "overview-ideal.png").exists()
    res = runner.invoke(app, ["eval", "compare", str(tmp_path / "run-a"), "--section", "by_bucket.unanswerable"])
    assert res.exit_code == 0 and "base" in res.output
    res = runner.invoke(app, ["eval", "--data", str(sets["musique-ideal"])])
    assert res.exit_code == 2 and "no model given" in res.output
    res = runner.invoke(app, ["eval", "compare", str(tmp_path / "nowhere")])
    assert res.exit_code == 1 and "no evaluation summary" in res.output


@pytest.mark.slow
def test_buckets_from_a_real_partition(eval_sets, tmp_path, caplog):
    """`curriculum partition` of the distractor set (scripted base model: right on every other question) gives
    the base-answerable / base-unanswerable breakdown of that set; the ideal set, not partitioned, gets none."""
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import PartitionConfig, partition

    rows = {_prompt_key(r): r for r in read_rows(eval_sets["musique-distractor"])}

    def base_model(messages, n, seed):
        r = rows[messages[-1]["content"]]
        answer = r["answers"][0] if r["curriculum_index"] % 2 == 0 else "zzzq"
        return [f"<reasoning>\n.\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n</answer>"] * n

    part = tmp_path / "partition"
    assert partition(PartitionConfig(shards=str(eval_sets["musique-distractor"]), out=str(part), backend="scripted",
                                     samples=2), backend=ScriptedBackend(script=base_model)).complete
    stats = pq.read_table(part / "stats.parquet").to_pylist()
    want = {s["id"]: s["bucket"] for s in stats}
    assert set(want.values()) == {"answerable", "unanswerable"}

    sets = {k: eval_sets[k] for k in ("musique-distractor", "musique-ideal")}
    with caplog.at_level("WARNING"):
        res = run(sets, tmp_path / "run", stats=[str(part)])
    assert "musique-ideal: no question is in the partition statistics" in caplog.text
    for e in res.summary["evals"]:
        recs = pq.read_table(tmp_path / "run" / e["results"]).to_pylist()
        if e["setting"] == "distractor":
            assert {r["id"]: r["bucket"] for r in recs} == want
            counts = {b: sum(1 for v in want.values() if v == b) for b in ("answerable", "unanswerable")}
            assert {b: e["by_bucket"][b]["n_questions"] for b in counts} == counts
            sub = [r for r in recs if r["bucket"] == "unanswerable"]
            assert e["by_bucket"]["unanswerable"]["citation_f1"] == pytest.approx(
                sum(r["citation_f1"] for r in sub) / len(sub))
        else:
            assert "by_bucket" not in e
    assert "## Base-answerable / base-unanswerable questions" in (tmp_path / "run" / "table.md").read_text()


@pytest.mark.slow
def test_secrets_stay_out_of_the_outputs(eval_sets, tmp_path):
    sets = {"musique-ideal": eval_sets["musique-ideal"]}
    run(sets, tmp_path / "run", backend_args={"api_key": "sk-very-secret", "base_url": "http://h/v1"})
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(files) >= 4 and not any(b"sk-very-secret" in p.read_bytes() for p in files)
    # a new key is not a new generation setting: the completions are reused
    res = run(sets, tmp_path / "run", backend_args={"api_key": "sk-other", "base_url": "http://h/v1"},
              backend=lambda model: pytest.fail("should not generate"))
    assert res.generated == 0 and res.summary["config"]["backend_args"]["api_key"] == "***"


def test_unknown_backend_is_named():
    with pytest.raises(KeyError, match="did you mean 'vllm'"):
        EvalConfig(models=[ModelSpec.parse("a")], data=["d"], backend="vlm").validate()
