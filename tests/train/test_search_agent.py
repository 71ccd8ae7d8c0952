"""A search agent trained for real: TRL's GRPOTrainer runs 3 steps of the tiny model through ``curriculum train``'s
``search-r1-cpu-tiny`` recipe, the toolkit's rollout function (train/_rollout.py) driving the search environment
against the real BM25 index of the MuSiQue sample, on rows of a built curriculum. The first turn is scripted (a
search for the question: a random model never writes one) and the model writes the second.

The loss mask is checked on the batch TRL itself computes (``_generate_and_score_completions``' ``tool_mask`` and
``completion_mask``): every token of an ``<information>`` block (and of the scripted turn) weighs 0, every token
the model sampled weighs 1; and the search rewards are logged by component, Search-R1's own (``search-r1``) as its
reward manager computes it on the rollout's prompt and completion tokens."""

from __future__ import annotations

import math

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
pytest.importorskip("bm25s")

BATCHES: list[dict] = []  # what TRL computed per generation batch
ROLLOUTS: list[dict] = []  # what the rollout function returned


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, min_max_shards):
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.train import SearchRollout, compose_train_config, train
    from rag_curriculum.train._trainer import CurriculumGRPOTrainer as trainer_cls

    index = tmp_path_factory.mktemp("search-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=20))
    out = tmp_path_factory.mktemp("search-run") / "run"
    original = trainer_cls._generate_and_score_completions
    call = SearchRollout.__call__

    def capture(self, inputs):
        batch = original(self, inputs)
        BATCHES.append({k: batch[k].tolist() for k in ("completion_ids", "completion_mask", "tool_mask")}
                       | {"curriculum_index": [x["curriculum_index"] for x in inputs]})
        return batch

    def record(self, prompts, trainer):
        got = call(self, prompts, trainer)
        ROLLOUTS.append(got)
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(trainer_cls, "_generate_and_score_completions", capture)
    mp.setattr(SearchRollout, "__call__", record)
    BATCHES.clear()
    ROLLOUTS.clear()
    try:
        cfg = compose_train_config("search-r1-cpu-tiny", [
            f"model.name_or_path={tiny_model_dir}", f"data.shards={min_max_shards}", f"run.output_dir={out}",
            f"agent.retriever={index}", "agent.max_turn_tokens=12", "grpo.report_to=none",
            # the recipe's rewards, and Search-R1's own (search-r1) logged beside them: it gets the model's tokenizer
            "rewards=[{name:search-em,weight:1.0},{name:search-f1,weight:0.0},{name:search-gold-found,weight:0.0},"
            "{name:search-count,weight:0.0},{name:search-r1,weight:0.0}]"])
        result = train(cfg, overrides=["recipe=search-r1-cpu-tiny"])
    finally:
        mp.undo()
    return result, list(BATCHES), list(ROLLOUTS)


def _runs(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """Maximal runs of equal mask: (mask value, ids)."""
    out: list[tuple[int, list[int]]] = []
    for t, m in zip(ids, mask, strict=True):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


def test_three_steps_with_finite_loss(trained):
    result, batches, rollouts = trained
    assert result.global_step == 3
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert len(batches) == len(rollouts) == 3  # one generation batch per step (2 prompts x 2 generations)
    # the rows in curriculum order, each prompt's 2 trajectories from the same row
    order = [i for b in batches for i in b["curriculum_index"]]
    assert order == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_information_tokens_weigh_zero_and_the_models_tokens_one(trained, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    _, batches, rollouts = trained
    seen_info = seen_model = 0
    for batch, rollout in zip(batches, rollouts, strict=True):
        for i, traj in enumerate(rollout["trajectory"]):
            n = len(rollout["completion_ids"][i])
            ids = batch["completion_ids"][i][:n]
            assert ids == rollout["completion_ids"][i]
            weight = [c * t for c, t in zip(batch["completion_mask"][i][:n], batch["tool_mask"][i][:n], strict=True)]
            assert weight == rollout["env_mask"][i]
            assert not any(batch["completion_mask"][i][n:])  # padding weighs nothing either
            model_text = [s["text"] for s in traj["segments"] if s["source"] == "model"][1:]  # turn 0 is scripted
            for m, run in _runs(ids, weight):
                text = tok.decode(run, skip_special_tokens=True)
                if m == 0:
                    seen_info += "<information>" in text
                else:
                    assert "<information>" not in text and "Doc 1(Title:" not in text
                    assert any(text.startswith(t) or t.startswith(text) for t in model_text), (text, model_text)
                    seen_model += 1
            # every token of every <information> block weighs 0
            for start in range(n):
                if tok.decode(ids[start:], skip_special_tokens=True).startswith("<information>"):
                    end = next(e for e in range(start + 1, n + 1)
                               if "</information>" in tok.decode(ids[start:e], skip_special_tokens=True))
                    assert set(weight[start:end]) == {0}
            assert traj["searches"], "the scripted first turn searches"
            assert sum(weight) > 0  # the model's own turn is trained on
    assert seen_info == sum(len(r["trajectory"]) for r in rollouts)
    assert seen_model >= seen_info


def test_search_rewards_logged_by_component(trained):
    result, _, rollouts = trained
    logged = {k for h in result.log_history for k in h}
    for key in ("rewards/search_em/mean", "rewards/search_f1/mean", "rewards/search_gold_found/mean",
                "rewards/search_count/mean", "search/exact_match", "search/f1", "search/gold_found",
                "search/searches", "search/format_errors", "rollout/searches", "rollout/gold_found"):
        assert key in logged, key
    counts = [h["rewards/search_count/mean"] for h in result.log_history if "rewards/search_count/mean" in h]
    assert all(c >= 1.0 for c in counts)
    assert all(t["searches"][0]["ids"] for r in rollouts for t in r["trajectory"])


def test_resuming_with_another_index_is_refused_and_names_the_way_to_start_fresh(trained, tmp_path):
    """The checkpoint records the fingerprint of the index its searches went to: a resume against another index
    is refused in one line, by the dry run too, and the hint names run.name= for a fresh run."""
    import shutil

    import yaml
    from conftest import MUSIQUE_DEV
    from rag_retriever import IndexConfig, build_index
    from support.cli_runs import one_error, run

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out)  # its one checkpoint is the last step's (save_total_limit 1)
    saved = yaml.safe_load((out / "train_config.yaml").read_text())
    other = tmp_path / "other-index"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_DEV), out=str(other), depth=5))
    base = ["train", "recipe=search-r1-cpu-tiny", f"model.name_or_path={saved['model']['name_or_path']}",
            f"data.shards={saved['data']['shards']}", f"run.output_dir={out}", "agent.max_turn_tokens=12"]
    for more in (["--dry-run"], []):
        r = run(*base, f"agent.retriever={other}", *more)
        assert "its searches went to another index" in one_error(r), r.output
        assert "run.name=NEW" in r.output
    r = run(*base, f"agent.retriever={saved['agent']['retriever']}", "--dry-run")  # the same index: finished
    assert r.exit_code == 0 and "is a finished run" in " ".join(r.output.split()), r.output


def test_dry_run_of_the_recipes(tmp_path):
    from rag_curriculum.train import compose_train_config
    from rag_curriculum.train._trl import check_recipe

    for recipe in ("search-r1", "search-r1-cpu-tiny"):
        cfg = compose_train_config(recipe, [f"data.shards={tmp_path}"])
        args, _ = check_recipe(cfg)
        assert not args.use_vllm and cfg.agent.retriever
    cfg = compose_train_config("search-r1", [f"data.shards={tmp_path}", "grpo.use_vllm=true"])
    from rag_curriculum.errors import ConfigError

    with pytest.raises(ConfigError, match="use_vllm"):
        cfg.validate()


def test_rollout_under_a_plain_trainer_finds_rows_by_prompt(tiny_model_dir, min_max_rows, tmp_path):
    """Without the toolkit's trainer (no recorded rows) the rollout finds each row by its prompt's text; a prompt
    two rows share is refused, never guessed. Each of a prompt's repeats is a distinct sample."""
    import types

    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from rag_curriculum.agents import get_agent_template
    from rag_curriculum.agents._retrievers import Hit
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.train import SearchRollout

    class Fixed:
        def search(self, queries, k):
            return [[Hit(f"p{i}", f"T{i}", f"text {i}") for i in range(k)] for _ in queries]

        def describe(self):
            return {}

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    args = GRPOConfig(output_dir=str(tmp_path), max_completion_length=8, use_cpu=True, report_to="none")
    trainer = types.SimpleNamespace(args=args, model=model, model_wrapped=model, accelerator=Accelerator(cpu=True),
                                    processing_class=tok, state=types.SimpleNamespace(global_step=0))
    rows = min_max_rows[:2]
    rollout = SearchRollout.from_rows(rows, Fixed(), first_turn="<search> {question} </search>")
    render = get_agent_template("search-r1").render
    prompts = [render(rows[0]["question"])] * 2 + [render(rows[1]["question"])] * 2
    out = rollout(prompts, trainer)
    assert [t["row_id"] for t in out["trajectory"]] == [rows[0]["id"]] * 2 + [rows[1]["id"]] * 2
    assert [t["sample"] for t in out["trajectory"]] == [0, 1, 0, 1]
    assert out["logprobs"] is None and len(out["prompt_ids"]) == 4
    for ids, mask, traj in zip(out["completion_ids"], out["env_mask"], out["trajectory"], strict=True):
        assert len(ids) == len(mask) and traj["searches"][0]["ids"] == ["p0", "p1", "p2"]
        first = [s["text"] for s in traj["segments"]][:2]  # the scripted search and the information block
        n0 = len(tok("".join(first), add_special_tokens=False)["input_ids"])
        assert set(mask[:n0 - 2]) == {0} and 1 in mask
    twin = SearchRollout.from_rows([rows[0], {**rows[1], "question": rows[0]["question"]}], Fixed())
    with pytest.raises(ConfigError, match="share the prompt"):
        twin(prompts[:1], trainer)


def test_search_r1_reward_scores_what_search_r1s_manager_decodes(trained, tiny_model_dir, min_max_shards):
    """``search-r1`` under ``curriculum train``: each step's logged mean is Search-R1's ``compute_score_em`` of
    ``decode(prompt_ids + completion_ids)`` (special tokens kept) of the rollout's own tokens, against the rows'
    ``reward_model.ground_truth.target``."""
    from transformers import AutoTokenizer

    from rag_curriculum.methods.search_r1 import search_r1_score
    from rag_curriculum.shards import read_rows

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    result, batches, rollouts = trained
    rows = {r["curriculum_index"]: r for r in read_rows(min_max_shards)}
    means = [h["rewards/search_r1/mean"] for h in result.log_history if "rewards/search_r1/mean" in h]
    assert len(means) == 3 and "search_r1/from_prompt" in {k for h in result.log_history for k in h}
    for mean, batch, rollout in zip(means, batches, rollouts, strict=True):
        scores = []
        for i, idx in enumerate(batch["curriculum_index"]):
            text = tok.decode(list(rollout["prompt_ids"][i]) + list(rollout["completion_ids"][i]))
            assert text.startswith("<|im_start|>user\n")
            scores.append(search_r1_score(text, rows[idx]["reward_model"]["ground_truth"]["target"]))
        assert mean == pytest.approx(sum(scores) / len(scores))
