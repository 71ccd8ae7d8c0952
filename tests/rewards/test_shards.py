"""The TRL reward functions on rows read back from shards that the curriculum builder wrote from real data."""

from __future__ import annotations

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.rewards import RagRlReward, get_format, parse_completion
from rag_curriculum.shards import shard_files
from rag_curriculum.train import reward_funcs_from_config

datasets = pytest.importorskip("datasets")

SOURCES = [("musique", MUSIQUE_TRAIN), ("hotpotqa", HOTPOT_TRAIN), ("2wikimultihopqa", TWOWIKI_TRAIN)]
N = 40


@pytest.fixture(scope="module")
def shard_rows(tmp_path_factory, shared_data) -> list[dict]:
    """One min-max curriculum mixing the three datasets, written as shards and read back as TRL reads them."""
    out = tmp_path_factory.mktemp("shards") / "curriculum"
    cfg = BuildConfig(sources=[SourceSpec(name, str(path), N) for name, path in SOURCES], out=str(out),
                      rows_per_shard=50, seed=7)
    build_curriculum(cfg, command="test")
    files = [str(f) for f in shard_files(out)]
    assert len(files) == 3  # 120 rows, 50 per shard
    ds = datasets.load_dataset("parquet", data_files={"train": files}, split="train")
    assert len(ds) == 3 * N
    return list(ds)


def answer_completion(row: dict, answer: str, cited: list[str]) -> list[dict]:
    """A conversational completion in the RAG-RL format, as GRPOTrainer hands it to reward functions."""
    text = (f"<reasoning>\nReading {row['passages'][0]['label']} first.\n</reasoning>\n<answer>\n"
            f"Final answer: {answer}\nSupporting passages: {', '.join(cited)}\n</answer>")
    return [{"role": "assistant", "content": text}]


def trl_reward_kwargs(inputs: list[dict]) -> dict:
    """GRPOTrainer._calculate_rewards: every column but prompt / completion / completion_ids, as lists."""
    keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [ex[k] for ex in inputs] for k in keys}
    kwargs.update(trainer_state=None, log_extra=lambda *a: None, log_metric=lambda *a: None)
    return kwargs


def test_rows_carry_what_the_rewards_read(shard_rows):
    comma_labels = 0
    for row in shard_rows:
        labels = [p["label"] for p in row["passages"]]
        assert row["answers"] and row["gold_labels"]
        assert set(row["gold_labels"]) <= set(labels)
        assert row["reward_model"]["ground_truth"] == {"answers": row["answers"], "gold_labels": row["gold_labels"],
                                                       "answerable": row["answerable"], "target": row["answers"]}
        assert row["extra_info"]["labels"] == labels
        assert get_format(row["template"]).template.name == row["template"]
        comma_labels += any("," in lb for lb in row["gold_labels"])
    assert comma_labels > 0, "the sample should exercise gold labels containing commas"


def test_trl_rewards_on_shard_rows(shard_rows):
    num_generations = 4
    inputs, completions, expected = [], [], []
    for row in shard_rows:
        labels = [p["label"] for p in row["passages"]]
        distractors = [lb for lb in labels if lb not in row["gold_labels"]]
        gens = [
            (answer_completion(row, row["answers"][-1], row["gold_labels"]), 5.0 + 5.0 + 1.0),
            (answer_completion(row, "zzz unknown", row["gold_labels"][:1]), None),
            (answer_completion(row, row["answers"][0], [*row["gold_labels"], *distractors[:2]]),
             5.0 + 5.0 - 2.0 * len(distractors[:2]) + 1.0),
            ([{"role": "assistant", "content": "I think " + row["answers"][0]}], -1.0),
        ]
        for completion, total in gens[:num_generations]:
            inputs.append(row)
            completions.append(completion)
            expected.append(total)

    kwargs = trl_reward_kwargs(inputs)
    assert {"answers", "gold_labels", "passages", "reward_model", "extra_info", "data_source"} <= set(kwargs)
    funcs, weights = reward_funcs_from_config(["rag-rl-answer", "rag-rl-citation", "rag-rl-format"])
    per_func = [f(prompts=[r["prompt"] for r in inputs], completions=completions, completion_ids=None, **kwargs)
                for f in funcs]
    total = RagRlReward()(completions=completions, **kwargs)
    assert len(total) == len(inputs) == 4 * 3 * N
    assert [sum(w * x for w, x in zip(weights, xs, strict=True)) for xs in zip(*per_func, strict=True)] == pytest.approx(total)
    for got, want in zip(total, expected, strict=True):
        if want is not None:
            assert got == pytest.approx(want)
    # the partial citation (one gold label of several) earns the recall share, nothing for the unknown answer
    for i in range(1, len(total), 4):
        gold = inputs[i]["gold_labels"]
        assert per_func[0][i] == 0.0
        assert per_func[1][i] == pytest.approx(5.0 / len(gold))


def test_comma_labels_in_shard_rows_are_resolved(shard_rows):
    rows = [r for r in shard_rows if any("," in lb for lb in r["gold_labels"])]
    for row in rows:
        labels = [p["label"] for p in row["passages"]]
        text = answer_completion(row, row["answers"][0], row["gold_labels"])[0]["content"]
        assert parse_completion(text, labels).citations == tuple(row["gold_labels"])
        assert parse_completion(text).citations != tuple(row["gold_labels"])  # without labels commas split


@pytest.mark.slow
def test_grpo_trainer_calls_our_rewards(shard_rows, tiny_model_dir, tmp_path):
    """One GRPO step of a tiny model on shard rows: TRL takes the reward functions as they are, with weights."""
    trl = pytest.importorskip("trl")
    funcs, weights = reward_funcs_from_config([{"name": "rag-rl", "weight": 1.0},
                                               {"name": "rag-rl-format", "weight": 0.5}])
    ds = datasets.Dataset.from_list(shard_rows[:4])
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=8, reward_weights=weights, shuffle_dataset=False, report_to="none",
        logging_steps=1, use_cpu=True, save_strategy="no", bf16=False, seed=0,
    )
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=funcs, args=args, train_dataset=ds,
                              processing_class=None)
    trainer.train()
    logs = {k for entry in trainer.state.log_history for k in entry}
    assert {"rewards/rag_rl/mean", "rewards/rag_rl_format/mean"} <= logs
    assert {"rag_rl/answer", "rag_rl/citation", "rag_rl/format", "rag_rl/format_valid"} <= logs
    # 8 random tokens never make a valid completion: the format reward is the penalty
    entry = next(e for e in trainer.state.log_history if "rewards/rag_rl_format/mean" in e)
    assert entry["rewards/rag_rl_format/mean"] == -1.0

