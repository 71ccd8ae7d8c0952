"""A search agent on TRL's native tool calling, trained for real: ``curriculum train`` with ``agent.protocol=tools``
hands TRL's GRPOTrainer an ``environment_factory`` (:class:`rag_curriculum.train.SearchEnvironment`), and TRL's
own tool loop parses the model's ``<tool_call>``, runs the environment's ``search`` against the real BM25 index of
the MuSiQue sample, appends the result as a ``tool`` message and generates again, for 3 GRPO steps of the tiny
model. The tiny tokenizer carries Qwen2.5's chat template (TRL's own copy, read from TRL's package), the one TRL
knows how to parse tool calls from; the first generation of each rollout is a scripted tool call (a random model
never writes one), every later one the model's.

Checked on what TRL itself computed: the tool results weigh 0 in the loss (TRL's ``tool_mask``), the model's own
continuation 1; the searches ran on the right rows with the row's gold flags; the search rewards read them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
trl = pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
pytest.importorskip("bm25s")

BATCHES: list[dict] = []
SCRIPTED: list[str] = []


@pytest.fixture(scope="module")
def qwen_template_model(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model with Qwen2.5's chat template (TRL's copy), which renders tools and whose tool calls TRL
    parses."""
    import shutil

    from transformers import AutoTokenizer

    template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    if not template.exists():  # the trl-oldest tier: TRL 1.0's tool loop has no templates of its own (and needs
        pytest.skip(f"TRL {trl.__version__} ships no tool-calling chat template")  # jmespath): agent.protocol=agent
    out = tmp_path_factory.mktemp("tiny-qwen-tools") / "model"
    shutil.copytree(tiny_model_dir, out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.chat_template = template.read_text(encoding="utf-8")
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, qwen_template_model, min_max_shards):
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.train import SearchEnvironment, compose_train_config, train
    from rag_curriculum.train._trainer import CurriculumGRPOTrainer as trainer_cls

    index = tmp_path_factory.mktemp("tools-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=20))
    out = tmp_path_factory.mktemp("tools-run") / "run"
    original_score = trainer_cls._generate_and_score_completions
    original_turn = trainer_cls._generate_single_turn

    def capture(self, inputs):
        batch = original_score(self, inputs)
        BATCHES.append({k: batch[k].tolist() for k in ("completion_ids", "completion_mask", "tool_mask")}
                       | {"rows": [x["id"] for x in inputs],
                          "records": [json.loads(json.dumps(e.record)) for e in self.environments]})
        return batch

    def scripted_first_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if num_generations == 1:  # after a tool result (TRL asks one per history): the model writes the rest
            return original_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        ids = []
        for p in prompt_ids:  # the question, from the rendered prompt
            question = self._tokenizer.decode(p).rsplit("Question: ", 1)[1].split("<|im_end|>", 1)[0].strip()
            call = json.dumps({"name": "search", "arguments": {"query": question}})
            text = f"<tool_call>\n{call}\n</tool_call><|im_end|>"
            SCRIPTED.append(question)
            ids.append(self._tokenizer(text, add_special_tokens=False)["input_ids"])  # prompts come repeated
        return ids, None

    mp = pytest.MonkeyPatch()
    mp.setattr(trainer_cls, "_generate_and_score_completions", capture)
    mp.setattr(trainer_cls, "_generate_single_turn", scripted_first_turn)
    BATCHES.clear()
    SCRIPTED.clear()
    try:
        cfg = compose_train_config("search-r1-cpu-tiny", [
            f"model.name_or_path={qwen_template_model}", f"data.shards={min_max_shards}", f"run.output_dir={out}",
            f"agent.retriever={index}", "agent.protocol=tools", "agent.template=search-tools",
            "agent.first_turn=null", "agent.top_k=1", "+grpo.max_tool_calling_iterations=1",
            "grpo.max_completion_length=700", "+grpo.generation_kwargs={max_new_tokens:24}",
            "grpo.report_to=none"])
        result = train(cfg, overrides=["recipe=search-r1-cpu-tiny", "agent.protocol=tools"])
    finally:
        mp.undo()
    assert SearchEnvironment  # the environment class the factory makes
    return result, list(BATCHES), index


def test_three_steps_of_trls_tool_loop_with_finite_loss(trained):
    result, batches, _ = trained
    assert result.global_step == 3
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert len(batches) == 3
    assert any(k.startswith("tools/call_frequency") or k.startswith("tools/") for h in result.log_history for k in h)


def test_every_rollout_searched_its_own_rows_question_with_the_rows_gold_flags(trained, min_max_shards):
    import pyarrow.parquet as pq

    from rag_curriculum.agents import IndexRetriever, RowView
    from rag_curriculum.shards import shard_files

    _, batches, index = trained
    rows = {r["id"]: r for f in shard_files(min_max_shards) for r in pq.read_table(f).to_pylist()}
    retriever = IndexRetriever(index)
    for batch in batches:
        for row_id, record in zip(batch["rows"], batch["records"], strict=True):
            assert record["row_id"] == row_id and len(record["searches"]) == 1
            s = record["searches"][0]
            row = rows[row_id]
            assert s["query"] == row["question"].strip()
            hits = retriever.search([s["query"]], 1)[0]  # agent.top_k=1
            assert s["ids"] == [h.id for h in hits]  # the index's ranking (difficulty none)
            assert s["gold"] == [RowView(row).is_gold(h) for h in hits]


def test_tool_results_weigh_zero_and_the_models_continuation_one(trained, qwen_template_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen_template_model))
    _, batches, _ = trained
    for batch in batches:
        for ids, cmask, tmask in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"],
                                     strict=True):
            weight = [c * t for c, t in zip(cmask, tmask, strict=True)]
            zero = tok.decode([i for i, w, c in zip(ids, weight, cmask, strict=True) if w == 0 and c], )
            assert "Doc 1(Title:" in zero and "<tool_response>" in zero  # the passages weigh nothing
            ones = tok.decode([i for i, w in zip(ids, weight, strict=True) if w == 1])
            assert "Doc 1(Title:" not in ones and "<tool_call>" in ones  # the call is the model's turn
            first_zero = weight.index(0)
            assert any(weight[first_zero:]) or sum(cmask) == first_zero  # generation resumes after the result


def test_the_search_rewards_read_the_environments(trained):
    result, _, _ = trained
    logged = {k for h in result.log_history for k in h}
    assert "search/searches" in logged or any("search_em" in k for k in logged)
    searches = [h["search/searches"] for h in result.log_history if "search/searches" in h]
    assert searches and all(s == 1.0 for s in searches)
