"""The curriculum builder on ../shared/data: schedules, the distractor formula, gold documents, labels, order,
determinism, evaluation sets, leakage, trainer tails, mixtures, atomic output."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_DEV, MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum import load_examples
from rag_curriculum.curricula import BuildConfig, BuildError, SourceSpec, build_curriculum, linear, min_max
from rag_curriculum.curricula.distractors import distractor_pool
from rag_curriculum.prompts import RAG_RL_SYSTEM_PROMPT, RAG_RL_USER_INSTRUCTIONS
from rag_curriculum.shards import ShardError, read_rows, shard_files, validate_shards


def build(tmp_path: Path, name: str = "out", **kw) -> tuple[list[dict], dict]:
    sources = kw.pop("sources", None) or [SourceSpec(kw.pop("dataset", "musique"),
                                                      str(kw.pop("input", MUSIQUE_TRAIN)), kw.pop("n", 60))]
    cfg = BuildConfig(sources=sources, out=str(tmp_path / name), **kw)
    res = build_curriculum(cfg, command="test")
    return read_rows(res.out), res.manifest


def examples_by_id(dataset, path):
    return {e.id: e for e in load_examples(dataset, path)}


SCHEDULES = [
    ("max", None, lambda i, n, K: K),
    ("linear", None, linear),
    ("min-max", None, min_max),
    ("piecewise", "1:0.25,5:0.25,K:0.5", lambda i, n, K: 1 if 4 * i <= n else (5 if 2 * i <= n else K)),
]


@pytest.mark.parametrize(("dataset", "path", "K"), [("musique", MUSIQUE_TRAIN, 20), ("hotpotqa", HOTPOT_TRAIN, 10),
                                                    ("2wikimultihopqa", TWOWIKI_TRAIN, 10)])
@pytest.mark.parametrize(("schedule", "pieces", "expected"), SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_every_schedule_on_real_data(shared_data, tmp_path, dataset, path, K, schedule, pieces, expected):
    n = 57
    rows, manifest = build(tmp_path, dataset=dataset, input=path, n=n, schedule=schedule, pieces=pieces,
                           rows_per_shard=20)
    source = examples_by_id(dataset, path)
    assert len(rows) == n and manifest["K"] == {dataset: K}
    assert len(shard_files(tmp_path / "out")) == 3, "fixed rows per shard"
    assert [r["curriculum_index"] for r in rows] == list(range(n)), "order kept in the files"
    assert [r["extra_info"]["index"] for r in rows] == list(range(n))
    assert [r["level"] for r in rows] == [expected(i, n, K) for i in range(1, n + 1)]
    assert len({r["source_id"] for r in rows}) == n, "sampled without replacement"
    for r in rows:
        ex = source[r["source_id"]]
        gold_pairs = {(d.title, d.text) for d in ex.documents if d.is_gold}
        k = sum(1 for d in ex.documents if not d.is_gold and (d.title, d.text) not in gold_pairs)
        j = sum(d.is_gold for d in ex.documents)
        assert r["hops"] == j
        assert r["num_distractors"] == min(max(r["level"] + 2 - j, 0), k)
        passages = r["passages"]
        assert len(passages) == j + r["num_distractors"]
        gold = sorted((p["title"], p["text"]) for p in passages if p["is_gold"])
        assert gold == sorted((d.title, d.text) for d in ex.documents if d.is_gold), "all gold documents present"
        distractors = {(d.title, d.text) for d in ex.documents if not d.is_gold}
        assert all((p["title"], p["text"]) in distractors for p in passages if not p["is_gold"])
        labels = [p["label"] for p in passages]
        assert len(set(labels)) == len(labels), "labels unique within the row"
        assert r["gold_labels"] == [p["label"] for p in passages if p["is_gold"]]
        assert r["reward_model"] == {"style": "rule", "ground_truth": {"answers": ex.answers,
                                                                        "gold_labels": r["gold_labels"],
                                                                        "answerable": True,
                                                                        "target": ex.answers}}
        assert r["answerable"] is True and r["gold_recall"] is None
        assert {(p["origin"], p["bm25_rank"]) for p in passages} == {("provided", None)}
        assert r["answers"] == ex.answers
        assert r["extra_info"]["labels"] == labels
        user = r["prompt"][1]["content"]
        assert r["prompt"][0] == {"role": "system", "content": RAG_RL_SYSTEM_PROMPT}
        assert user.startswith(RAG_RL_USER_INSTRUCTIONS) and user.endswith(f"Question: {ex.question}")
        positions = [user.index(f"Title: {lb}\n{p['text']}") for lb, p in zip(labels, passages, strict=True)]
        assert positions == sorted(positions), "passages appear in the presented order"


def test_repeated_titles_get_unique_labels(shared_data, tmp_path):
    rows, _ = build(tmp_path, n=None, schedule="max")
    row = next(r for r in rows if r["source_id"] == "2hop__6584_6587")
    labels = [p["label"] for p in row["passages"] if p["title"] == "Canon law"]
    assert sorted(labels) == ["Canon law", "Canon law (2)"]
    assert sorted(row["gold_labels"]) == ["Canon law", "Canon law (2)"]


def test_same_inputs_and_seed_give_byte_identical_shards(shared_data, tmp_path):
    for name in ("a", "b"):
        build(tmp_path, name, n=80, schedule="linear", seed=3, rows_per_shard=30)
    fa, fb = shard_files(tmp_path / "a"), shard_files(tmp_path / "b")
    assert len(fa) == 3
    assert [f.read_bytes() for f in fa] == [f.read_bytes() for f in fb]
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert ma["shards"] == mb["shards"]
    build(tmp_path, "c", n=80, schedule="linear", seed=4, rows_per_shard=30)
    assert [f.read_bytes() for f in shard_files(tmp_path / "c")] != [f.read_bytes() for f in fa]


def test_columnar_rendering_equals_row_rendering(shared_data, tmp_path):
    from support.oracles.row_oracle import render

    from rag_curriculum.curricula._plan import plan_rows
    from rag_curriculum.curricula._render import render_rows
    from rag_curriculum.curricula._sources import load_source
    from rag_curriculum.shards import rows_to_table

    for setting, schedule in (("curriculum", "linear"), ("distractor", "max"), ("ideal", "max")):
        cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule=schedule,
                          setting=setting, seed=5, allow_split_mismatch=True)
        plan, _ = plan_rows(cfg, [load_source(cfg, cfg.sources[0])])
        assert render_rows(plan, cfg, 10, 60).equals(rows_to_table(render(plan, cfg, 10, 60)))


@pytest.mark.slow
def test_parallel_workers_write_the_same_bytes(shared_data, tmp_path):
    build(tmp_path, "one", n=None, schedule="linear", rows_per_shard=25, workers=1)
    build(tmp_path, "two", n=None, schedule="linear", rows_per_shard=25, workers=2)
    one, two = shard_files(tmp_path / "one"), shard_files(tmp_path / "two")
    assert len(one) == 4
    assert [f.read_bytes() for f in one] == [f.read_bytes() for f in two]


def test_a_row_does_not_change_when_others_are_added(shared_data, tmp_path):
    small, _ = build(tmp_path, "small", n=20, schedule="max")
    big, _ = build(tmp_path, "big", n=None, schedule="max")
    by_id = {r["id"]: r for r in big}
    for r in small:
        assert by_id[r["id"]]["passages"] == r["passages"]
        assert by_id[r["id"]]["prompt"] == r["prompt"]


def test_distractors_are_nested_across_levels(shared_data, tmp_path):
    lo, _ = build(tmp_path, "lo", n=None, schedule="max", K=3)
    hi, _ = build(tmp_path, "hi", n=None, schedule="max", K=12)
    hi_by = {r["id"]: r for r in hi}
    for r in lo:
        a = {(p["title"], p["text"]) for p in r["passages"]}
        b = {(p["title"], p["text"]) for p in hi_by[r["id"]]["passages"]}
        assert a <= b


@pytest.mark.slow
def test_orderings(shared_data, tmp_path):
    by_level, _ = build(tmp_path, "lv", n=None, schedule="linear")
    shuffled, _ = build(tmp_path, "sh", n=None, schedule="linear", order="shuffled")
    hops, _ = build(tmp_path, "hp", n=None, schedule="linear", order="hops-level")
    assert Counter(r["level"] for r in by_level) == Counter(r["level"] for r in shuffled)
    assert [r["level"] for r in shuffled] != sorted(r["level"] for r in shuffled)
    keys = [(r["hops"], r["level"]) for r in hops]
    assert keys == sorted(keys)
    for h in {r["hops"] for r in hops}:  # every hop group spans the curriculum on its own
        group = [r["level"] for r in hops if r["hops"] == h]
        if len(group) >= 20:
            assert group[0] == 1 and group[-1] == 20
    assert [r["curriculum_index"] for r in hops] == list(range(len(hops)))


def test_request_for_more_than_exist_is_an_error(shared_data, tmp_path):
    with pytest.raises(BuildError, match=r"asked for n=101 questions but only 100 are available.*--n all"):
        build(tmp_path, n=101)
    rows, _ = build(tmp_path, n=None)
    assert len(rows) == 100


def test_mixture_with_quotas_and_per_dataset_K(shared_data, tmp_path):
    rows, manifest = build(tmp_path, schedule="min-max", sources=[
        SourceSpec("musique", str(MUSIQUE_TRAIN), 40), SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 20),
        SourceSpec("2wikimultihopqa", str(TWOWIKI_TRAIN), 20)])
    for half in (rows[:40], rows[40:]):  # both halves interleave the sources, though their K differ
        assert {r["data_source"] for r in half} == {"musique", "hotpotqa", "2wikimultihopqa"}
    assert Counter(r["data_source"] for r in rows) == {"musique": 40, "hotpotqa": 20, "2wikimultihopqa": 20}
    assert manifest["K"] == {"musique": 20, "hotpotqa": 10, "2wikimultihopqa": 10}
    assert {r["level"] for r in rows if r["data_source"] == "musique"} == {1, 20}
    assert {r["level"] for r in rows if r["data_source"] != "musique"} == {1, 10}
    first_half = {r["data_source"] for r in rows[:40]}
    assert first_half == {"musique", "hotpotqa", "2wikimultihopqa"}, "sources interleaved"
    assert [s["sampled"] for s in manifest["sources"]] == [40, 20, 20]
    assert {s["license"] for s in manifest["sources"]} == {"cc-by-4.0", "cc-by-sa-4.0", "apache-2.0"}


@pytest.mark.parametrize(("tail", "rows"), [("trim", 42), ("pad", 84), ("keep", 50)])
def test_trainer_tail(shared_data, tmp_path, tail, rows):
    out, manifest = build(tmp_path, n=50, batch_prompts=42, tail=tail, schedule="linear")
    assert len(out) == rows
    assert manifest["trainer_tail"] == {"batch_prompts": 42, "steps": rows // 42, "unseen_rows": rows % 42}
    assert out[-1]["level"] == 20, "the schedule spans the fitted row count"


def test_evaluation_settings(shared_data, tmp_path):
    dist, m = build(tmp_path, "d", input=MUSIQUE_DEV, n=50, setting="distractor")
    ideal, _ = build(tmp_path, "i", input=MUSIQUE_DEV, n=50, setting="ideal")
    source = examples_by_id("musique", MUSIQUE_DEV)
    assert m["kind"] == "distractor" and m["trainer_tail"] is None
    for r in dist:
        ex = source[r["source_id"]]
        assert r["split"] == "dev" and r["setting"] == "distractor"
        assert r["num_distractors"] == min(18, len(distractor_pool(ex)))
        assert sum(p["is_gold"] for p in r["passages"]) == ex.hops
    assert all(r["num_distractors"] == 0 and all(p["is_gold"] for p in r["passages"]) for r in ideal)
    assert [r["source_id"] for r in dist] == [r["source_id"] for r in ideal], "same questions in both settings"


@pytest.mark.slow
def test_leakage_is_refused_dropped_or_reported(shared_data, tmp_path):
    build(tmp_path, "eval", input=MUSIQUE_TRAIN, n=30, setting="distractor", allow_split_mismatch=True)
    ev = str(tmp_path / "eval")
    with pytest.raises(BuildError, match=r"30 training question\(s\) also appear .*\(30 by id"):
        build(tmp_path, "t1", n=None, eval_sets=[ev])
    rows, m = build(tmp_path, "t2", n=None, eval_sets=[ev], leakage="drop")
    assert len(rows) == 70 and m["leakage"]["by_id"] == 30
    assert m["sources"][0]["excluded"] == {"leaked": 30}
    clean, m = build(tmp_path, "t3", input=MUSIQUE_TRAIN, n=None, eval_sets=[str(tmp_path / "t2")], leakage="warn")
    assert m["leakage"]["by_id"] == 70


def test_leakage_by_normalised_question_text(shared_data, tmp_path):
    import json as _json

    raw = [_json.loads(line) for line in MUSIQUE_TRAIN.read_text().splitlines()][:5]
    for r in raw:
        r["id"] = "other__" + r["id"]
        r["question"] = "  " + r["question"].upper() + "?? "
    p = tmp_path / "musique_dev_copy.jsonl"  # the same questions as train, reworded ids and case
    p.write_text("".join(_json.dumps(r) + "\n" for r in raw))
    build(tmp_path, "eval", input=p, n=None, setting="ideal")
    with pytest.raises(BuildError, match="0 by id, 5 by normalised question text"):
        build(tmp_path, "t", n=None, eval_sets=[str(tmp_path / "eval")])


def test_existing_output_is_not_overwritten(shared_data, tmp_path):
    build(tmp_path, n=10)
    with pytest.raises(ShardError, match="already exists.*--overwrite"):
        build(tmp_path, n=10)
    rows, _ = build(tmp_path, n=12, overwrite=True)
    assert len(rows) == 12


def test_interrupted_build_leaves_nothing_that_validates(shared_data, tmp_path, monkeypatch):
    import rag_curriculum.cards as card

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(card, "write_build_card", boom)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, n=10)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []
    with pytest.raises(ShardError, match="no such shard directory"):
        validate_shards(tmp_path / "out")


def test_validate_detects_tampering_and_missing_manifest(shared_data, tmp_path):
    build(tmp_path, n=30, rows_per_shard=10)
    d = tmp_path / "out"
    validate_shards(d)
    f = d / "data" / "part-00001.parquet"
    t = pq.read_table(f).slice(0, 5)
    pq.write_table(t, f)
    with pytest.raises(ShardError, match="data/part-00001.parquet: content hash differs"):
        validate_shards(d)
    (d / "manifest.json").unlink()
    with pytest.raises(ShardError, match="no manifest.json"):
        validate_shards(d)


def test_data_card_and_manifest(shared_data, tmp_path):
    rows, m = build(tmp_path, n=40, schedule="min-max", batch_prompts=42)
    d = tmp_path / "out"
    card = (d / "README.md").read_text()
    assert card.startswith("---\nlicense: cc-by-4.0\n")
    assert "path: data/*.parquet" in card and "```\ntest\n```" in card
    assert "## Loading" in card and "$" not in card, "rendered from data_cards/build.md, every placeholder filled"
    assert (d / "level_by_index.png").read_bytes()[:4] == b"\x89PNG"
    assert m["counts"]["levels"] == {"1": 20, "20": 20}
    assert m["config"]["schedule"] == "min-max" and m["seed"] == 0 and m["schema_version"] == 1
    assert m["sources"][0]["sha256"] and len(m["sources"][0]["sha256"]) == 64
    assert m["trainer_tail"]["unseen_rows"] == 40


def test_mixture_linear_keeps_sources_interleaved(shared_data, tmp_path):
    rows, _ = build(tmp_path, schedule="linear", sources=[
        SourceSpec("musique", str(MUSIQUE_TRAIN), 50), SourceSpec("2wikimultihopqa", str(TWOWIKI_TRAIN), 50)])
    for decile in range(10):
        part = rows[decile * 10:(decile + 1) * 10]
        assert {r["data_source"] for r in part} == {"musique", "2wikimultihopqa"}, decile
    for src, K in (("musique", 20), ("2wikimultihopqa", 10)):
        levels = [r["level"] for r in rows if r["data_source"] == src]
        assert levels == sorted(levels) and levels[0] == 1 and levels[-1] == K


def test_non_monotone_schedule_is_sorted_by_level(shared_data, tmp_path):
    rows, _ = build(tmp_path, n=40, schedule="piecewise", pieces="K:0.5,1:0.5")
    assert [r["level"] for r in rows] == [1] * 20 + [20] * 20


@pytest.mark.parametrize(("kw", "message"), [
    ({"input": MUSIQUE_DEV, "setting": "curriculum"}, "a training curriculum from the dev split"),
    ({"input": MUSIQUE_TRAIN, "setting": "ideal"}, "an? ideal evaluation set from the train split"),
])
def test_split_mismatch_is_refused(shared_data, tmp_path, kw, message):
    with pytest.raises(BuildError, match=message):
        build(tmp_path, n=5, **kw)
    rows, _ = build(tmp_path, "ok", n=5, allow_split_mismatch=True, **kw)
    assert len(rows) == 5


def test_split_option_contradicting_the_file_name_is_refused(shared_data, tmp_path):
    with pytest.raises(BuildError, match="--split train contradicts the file name"):
        build(tmp_path, sources=[SourceSpec("musique", str(MUSIQUE_DEV), 5, split="train")])


def test_duplicate_questions_are_excluded_and_counted(shared_data, tmp_path):
    lines = MUSIQUE_TRAIN.read_text().splitlines()
    p = tmp_path / "musique_train_dup.jsonl"
    p.write_text("\n".join(lines[:10] + lines[:3]) + "\n")
    rows, m = build(tmp_path, input=p, n=None)
    assert len(rows) == 10 and len({r["id"] for r in rows}) == 10
    assert m["sources"][0]["excluded"] == {"duplicate_id": 3}


def test_pieces_need_the_piecewise_schedule_and_levels_within_K(shared_data, tmp_path):
    with pytest.raises(ValueError, match="--pieces is for --schedule piecewise"):
        build(tmp_path, n=10, schedule="linear", pieces="1:0.5,K:0.5")
    with pytest.raises(ValueError, match="outside 1..K"):
        build(tmp_path, n=10, schedule="piecewise", pieces="1:0.5,30:0.5")


def test_overwrite_only_replaces_toolkit_outputs(shared_data, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("precious")
    with pytest.raises(ShardError, match="not an output of this toolkit"):
        build(tmp_path, "victim", n=5, overwrite=True)
    assert (victim / "thesis.tex").read_text() == "precious"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ShardError, match="is a file"):
        build(tmp_path, "afile", n=5)
    empty = tmp_path / "empty"
    empty.mkdir()
    rows, _ = build(tmp_path, "empty", n=5)
    assert len(rows) == 5


def test_a_racing_build_does_not_replace_without_overwrite(shared_data, tmp_path, monkeypatch):
    """Another build finishes while this one is writing: this one fails instead of replacing it."""
    import rag_curriculum.shards as shards

    original = shards.commit_output

    def racing(tmp, out, *, overwrite=True):
        monkeypatch.setattr(shards, "commit_output", original)
        build(tmp_path, "out-of-band", n=3)
        (tmp_path / "out-of-band").rename(out)
        return original(tmp, out, overwrite=overwrite)

    monkeypatch.setattr(shards, "commit_output", racing)
    with pytest.raises(ShardError, match="already exists"):
        build(tmp_path, "race", n=5)
    assert len(read_rows(tmp_path / "race")) == 3


def test_data_card_front_matter_parses_as_a_hub_dataset_card(shared_data, tmp_path):
    from huggingface_hub import DatasetCard

    build(tmp_path, sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 10),
                             SourceSpec("2wikimultihopqa", str(TWOWIKI_TRAIN), 10)])
    card = DatasetCard.load(tmp_path / "out" / "README.md")
    assert sorted(card.data.license) == ["apache-2.0", "cc-by-4.0"]
    assert card.data.configs[0]["data_files"][0]["path"] == "data/*.parquet"
    assert card.data.source_datasets == ["dgslibisey/MuSiQue", "ohjoonhee/2WikiMultihopQA"], "Hub dataset ids"
    assert card.data.task_categories == ["question-answering"]


@pytest.mark.slow
def test_a_finished_build_keeps_none_of_its_rows_alive(tmp_path, shared_data):
    """In a fresh interpreter (matplotlib not yet imported), with the cyclic GC off as in a build: once
    build_curriculum returns, no Example is left, neither referenced nor in a garbage cycle. matplotlib's first
    import keeps its callers' frames in such a cycle; imported deep inside the build it kept every row alive until
    the next full collection, which took seconds at 90k rows."""
    import subprocess
    import sys

    code = f"""
import gc
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.records import Example
gc.disable()
build_curriculum(BuildConfig(sources=[SourceSpec("musique", {str(MUSIQUE_TRAIN)!r}, None)], schedule="min-max",
                             out={str(tmp_path / "b")!r}), command="test")
import matplotlib.pyplot  # imported by the build, for the card
print(sum(isinstance(o, Example) for o in gc.get_objects()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0"
