"""verl 0.9.1 loading the toolkit's ``compute_score`` by path (``reward.custom_reward_function.path/.name`` as the
launch script sets them) and its reward loop scoring hand-written responses to real rows: the scores must be the
RAG-RL reward's, computed here independently with ``RagRlReward`` from the rows' own columns."""

from __future__ import annotations

import copy
import importlib.util
import inspect
from pathlib import Path

import pytest

from rag_curriculum.rewards import RagRlReward
from rag_curriculum.verl.data import reward_path

# tests/ is on sys.path (pytest's pythonpath), so without verl installed `verl` would resolve to this folder as a
# namespace package: only a regular package (one with an __init__.py, an origin) is verl.
pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")

# Rows of the min-max curriculum: a level-1 row answered right, a level-20 row (with distractors to cite wrongly)
# answered wrong, a level-1 row answered out of format.
ROWS = (0, 60, 1)
EXTRA_KEYS = {"score", "answer", "citation", "format", "acc", "answer_f1", "citation_precision", "citation_recall",
              "citation_f1", "num_incorrect", "format_valid", "abstained"}


def _responses(items: list[dict]) -> list[str]:
    """A correct answer citing exactly the gold passages; a wrong answer citing one non-gold passage; a response
    that ignores the format."""
    right, wrong, malformed = items
    non_gold = next(label for label in wrong["extra_info"]["labels"]
                    if label not in wrong["gold_labels"] and "," not in label)
    return [
        "<reasoning>\nThe passages say so.\n</reasoning>\n<answer>\nFinal answer: " + right["answers"][0]
        + "\nSupporting passages: " + ", ".join(right["gold_labels"]) + "\n</answer>",
        "<reasoning>\nA guess.\n</reasoning>\n<answer>\nFinal answer: Nobody Inparticular\nSupporting passages: "
        + non_gold + "\n</answer>",
        "I think it is " + malformed["answers"][0] + ".",
    ]


def _expected(items: list[dict], texts: list[str], **constants) -> list:
    """The RAG-RL breakdowns computed without verl and without compute_score: the TRL path of RagRlReward, with the
    passage labels from the `passages` column (compute_score reads extra_info.labels)."""
    reward = RagRlReward(log_components=False, **constants)
    return reward.components(texts, reward_model=[it["reward_model"] for it in items],
                             passages=[it["passages"] for it in items])


def _rollout_batch(items: list[dict], texts: list[str], tokenizer):
    """A DataProto as verl's rollout hands it to the reward loop: the dataset's collated rows (what the data loader
    yields), prompt ids left-padded, response ids + EOS right-padded, and the attention mask over both."""
    import torch
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = collate_fn(items)
    prompts = [tokenizer.apply_chat_template(list(it["raw_prompt"]), add_generation_prompt=True, tokenize=False)
               for it in items]
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    response_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    P, R, pad = max(map(len, prompt_ids)), max(map(len, response_ids)) + 5, tokenizer.pad_token_id
    prompt_t = torch.tensor([[pad] * (P - len(p)) + p for p in prompt_ids])
    response_t = torch.tensor([r + [pad] * (R - len(r)) for r in response_ids])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (R - len(r))
                         for p, r in zip(prompt_ids, response_ids, strict=True)])
    non_tensors = {k: v for k, v in batch.items() if not isinstance(v, torch.Tensor)}
    data = DataProto.from_dict(tensors={"prompts": prompt_t, "responses": response_t, "attention_mask": mask,
                                        "input_ids": torch.cat([prompt_t, response_t], dim=1)},
                               non_tensors=non_tensors)
    return data, [len(r) for r in response_ids]


def _score_with_reward_loop(cfg, data):
    """verl's reward loop as RewardLoopManager.compute_rm_score runs it, in this process instead of a Ray actor:
    a RewardLoopWorker (which loads the reward manager and the custom reward function from the config) scores the
    rows one by one, and the manager class assembles the token-level reward tensor."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.utils.ray_utils import get_event_loop

    worker = RewardLoopWorker(cfg)
    outputs = get_event_loop().run_until_complete(worker.compute_score_batch(data))
    scores = [o["reward_score"] for o in outputs]
    rm_scores = resolve_reward_manager_cls(cfg).assemble_rm_scores(data, scores)
    return worker, outputs, rm_scores


def test_custom_reward_fn_is_the_toolkits_compute_score(verl_config, dataset):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from rag_curriculum.verl.rewards import compute_score

    fn = get_custom_reward_fn(verl_config)
    raw = fn.args[0]  # verl wraps it in a partial that merges reward_kwargs
    assert raw.__name__ == "compute_score"
    assert Path(inspect.getsourcefile(raw)).resolve() == Path(reward_path()).resolve()
    # verl executes the file as a module of its own (by path), not as rag_curriculum.verl.rewards
    assert raw is not compute_score and raw.__module__ != compute_score.__module__
    item = dataset[0]
    text = _responses([dataset[i] for i in ROWS])[0]
    got = fn(data_source=item["data_source"], solution_str=text, ground_truth=item["reward_model"]["ground_truth"],
             extra_info=item["extra_info"])
    assert got == compute_score(item["data_source"], text, item["reward_model"]["ground_truth"], item["extra_info"])
    assert got["score"] == 11.0


def test_reward_loop_scores_real_rows(verl_config, dataset, tokenizer):
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager

    items = [dataset[i] for i in ROWS]
    assert [it["level"] for it in items] == [1, 20, 1]
    texts = _responses(items)
    data, response_lengths = _rollout_batch(items, texts, tokenizer)
    worker, outputs, rm_scores = _score_with_reward_loop(verl_config, data)

    assert type(worker.reward_manager) is NaiveRewardManager
    expected = _expected(items, texts)
    assert [o["reward_score"] for o in outputs] == [b.total for b in expected]
    # a right answer with the gold citations; a wrong answer with one wrong citation; a broken format
    assert [(b.answer, b.citation, b.format) for b in expected] == [(5.0, 5.0, 1.0), (0.0, -2.0, 1.0),
                                                                      (0.0, 0.0, -1.0)]
    for out, b in zip(outputs, expected, strict=True):
        info = out["reward_extra_info"]
        assert set(info) == EXTRA_KEYS  # the same keys for every response, as verl's metrics need
        assert (info["answer"], info["citation"], info["format"]) == (b.answer, b.citation, b.format)
        assert (info["acc"], info["num_incorrect"], info["format_valid"]) == (
            b.exact_match, float(b.num_incorrect), float(b.format_valid))
        assert info["citation_recall"] == b.citation_recall and info["answer_f1"] == b.answer_f1
    # the token-level reward: each total on the response's last token (its EOS), zeros elsewhere
    assert rm_scores.shape == data.batch["responses"].shape
    for i, (b, n) in enumerate(zip(expected, response_lengths, strict=True)):
        assert rm_scores[i, n - 1].item() == b.total
        assert rm_scores[i].abs().sum().item() == abs(b.total)


def test_reward_kwargs_reach_compute_score(launch_overrides, compose_verl_config, dataset, tokenizer):
    """The docs' (docs/rewards.md) `+reward.custom_reward_function.reward_kwargs.NAME=VALUE` overrides set RagRlReward's constants
    through verl's config."""
    cfg = compose_verl_config([*launch_overrides,
                               "+reward.custom_reward_function.reward_kwargs.format_penalty=2.0",
                               "+reward.custom_reward_function.reward_kwargs.gamma_incorrect=3.0"])
    items = [dataset[i] for i in ROWS]
    texts = _responses(items)
    data, _ = _rollout_batch(items, texts, tokenizer)
    _, outputs, _ = _score_with_reward_loop(copy.deepcopy(cfg), data)
    expected = _expected(items, texts, format_penalty=2.0, gamma_incorrect=3.0)
    assert [o["reward_score"] for o in outputs] == [b.total for b in expected] == [11.0, -2.0, -2.0]


def test_reward_loop_on_unanswerable_rows(launch_overrides, compose_verl_config, tokenizer, tmp_path):
    """A curriculum with unanswerable rows, read by verl's own dataset: `answerable` reaches compute_score through
    reward_model.ground_truth, and the abstention penalty through reward_kwargs."""
    from conftest import MUSIQUE_TRAIN
    from verl.trainer.ppo.utils import create_rl_dataset

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import shard_files

    out = tmp_path / "u"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 12)], schedule="max", K=3,
                                 unanswerable_fraction=0.5, out=str(out)), command="test")
    files = "[" + ",".join(str(f) for f in shard_files(out)) + "]"
    cfg = compose_verl_config([*launch_overrides, f"data.train_files={files}", f"data.val_files={files}",
                               "+reward.custom_reward_function.reward_kwargs.abstain_penalty=1.0",
                               "data.train_batch_size=12"])  # 12 rows: one step (the launch script's 42 gives none)
    data_cfg = cfg.data
    ds = create_rl_dataset(data_cfg.train_files, data_cfg, tokenizer, None, is_train=True)
    items = [ds[i] for i in range(len(ds))]
    assert {it["reward_model"]["ground_truth"]["answerable"] for it in items} == {True, False}
    abstain = "<reasoning>\nNothing fits.\n</reasoning>\n<answer>\nFinal answer: unanswerable\nSupporting passages: \n</answer>"
    data, _ = _rollout_batch(items, [abstain] * len(items), tokenizer)
    _, outputs, _ = _score_with_reward_loop(copy.deepcopy(cfg), data)
    # unanswerable: 5 + 5 + 1; answerable: a wrong answer citing nothing (0 + 0 + 1) less the penalty 1
    assert [o["reward_score"] for o in outputs] == [
        11.0 if not it["reward_model"]["ground_truth"]["answerable"] else 0.0 for it in items]
    assert all(o["reward_extra_info"]["abstained"] == 1.0 for o in outputs)
