"""Search-R1's reward under verl 0.9.1.

* verl's ``search_r1_like_qa_em`` ("Adapted from" Search-R1's ``qa_em.py``) is compared with the original's frozen
  scores on every one of the 216 trajectories of ``tests/support/search_r1_trajectories.py``: it is *not* the same function
  (one ``<answer>`` match is an answer there, and more than ten ``<answer>``/``</answer>`` tags divide the score by
  4), and where it differs is exactly that, on the full sequence; on the response alone, as verl's ``naive`` manager
  hands it, it differs more (counted and printed).
* The toolkit's :class:`~rag_curriculum.verl.reward_manager.SearchR1RewardManager`, loaded by verl's reward loop
  from its path, decodes as Search-R1's manager does and gives the original's score on every trajectory.
* Rows the toolkit builds (a MuSiQue curriculum, a Search-R1 data file built with ``--dataset search-r1``), read by
  verl's own dataset, carry ``reward_model.ground_truth.target``: verl's Search-R1 reward reads them without a
  KeyError, and scores them as the toolkit's ``search-r1`` does where the two functions agree.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import re

import pytest
from support.search_r1_trajectories import SETTINGS, TABLE, strip_special, trajectories

pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")


@pytest.fixture(scope="module")
def table():
    frozen = json.loads(TABLE.read_text())
    trajs = trajectories()
    assert [t["id"] for t in trajs] == [r["id"] for r in frozen["trajectories"]]
    assert frozen["settings"] == list(SETTINGS)
    return trajs, [r["scores"][0] for r in frozen["trajectories"]]


def _verl_em(text: str, target) -> float:
    from verl.utils.reward_score import search_r1_like_qa_em

    with contextlib.redirect_stdout(io.StringIO()):  # it prints one call in 64
        return float(search_r1_like_qa_em.compute_score(text, {"target": target}))


def _verls_rules(text: str, target) -> float:
    """verl's copy, as its source reads: one match is enough, more than ten <answer> or </answer> divide by 4."""
    from rag_curriculum.grammar import search_r1_answer_matches
    from rag_curriculum.methods.search_r1._reward import em_check

    matches = search_r1_answer_matches(text)
    if not matches:
        return 0.0
    if not em_check(matches[-1].group(1).strip(), target):
        return 0.0
    return 0.25 if text.count("<answer>") > 10 or text.count("</answer>") > 10 else 1.0


def test_verls_search_r1_like_qa_em_is_not_search_r1s_function(table):
    from verl.utils.reward_score import default_compute_score

    trajs, original = table
    on_sequence = [_verl_em(t["sequence"], t["target"]) for t in trajs]
    on_response = [_verl_em(strip_special(t["response"]), t["target"]) for t in trajs]
    # where it differs on prompt + response is exactly its two rules
    assert on_sequence == [_verls_rules(t["sequence"], t["target"]) for t in trajs]
    one_match = [t["id"] for t in trajs if len(re.findall(r"<answer>(.*?)</answer>", t["sequence"], re.S)) == 1]
    differ_seq = [t["id"] for t, a, b in zip(trajs, on_sequence, original, strict=True) if a != b]
    differ_resp = [t["id"] for t, a, b in zip(trajs, on_response, original, strict=True) if a != b]
    assert set(differ_seq) <= set(one_match) | {t["id"] for t in trajs if t["behaviour"] == "many_answers"}
    assert any("many_answers" in x for x in differ_seq) and any("plain" in x for x in differ_seq)
    print(f"\nverl 0.9.1 search_r1_like_qa_em vs Search-R1 compute_score_em on {len(trajs)} trajectories: "
          f"{len(trajs) - len(differ_seq)} agree on prompt + response, {len(trajs) - len(differ_resp)} on the "
          "response alone (verl's naive manager)")
    assert len(differ_seq) == 40 and len(differ_resp) == 52
    # verl routes its searchR1_* data sources to it (the toolkit's rows keep Search-R1's own names: nq, hotpotqa ...)
    with contextlib.redirect_stdout(io.StringIO()):
        assert default_compute_score("searchR1_nq", "<answer> Paris </answer>", {"target": ["Paris"]}) == 1.0


def _batch(tokenizer, trajs):
    """A DataProto as verl's rollout hands it to the reward loop: prompt ids left-padded, response ids (special
    tokens as the tokens they are) right-padded, the attention mask over both."""
    import numpy as np
    import torch
    from verl import DataProto

    prompts = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": t["user"]}], tokenize=False,
                                                       add_generation_prompt=True), add_special_tokens=False)["input_ids"]
               for t in trajs]
    responses = [tokenizer(t["response"], add_special_tokens=False)["input_ids"] for t in trajs]
    P, R, pad = max(map(len, prompts)), max(map(len, responses)) + 3, tokenizer.pad_token_id
    prompt_t = torch.tensor([[pad] * (P - len(p)) + p for p in prompts])
    response_t = torch.tensor([r + [pad] * (R - len(r)) for r in responses])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r))
                         for p, r in zip(prompts, responses, strict=True)])
    rm = np.array([{"style": "rule", "ground_truth": {"target": t["target"]}} for t in trajs], dtype=object)
    non = {"data_source": np.array(["nq"] * len(trajs), dtype=object), "reward_model": rm,
           "extra_info": np.array([{"index": i} for i in range(len(trajs))], dtype=object)}
    return DataProto.from_dict(tensors={"prompts": prompt_t, "responses": response_t, "attention_mask": mask,
                                        "input_ids": torch.cat([prompt_t, response_t], dim=1)}, non_tensors=non), \
        [len(r) for r in responses]


def _manager_overrides() -> list[str]:
    from rag_curriculum.verl.data import reward_path

    return ["reward.reward_manager.source=importlib", "reward.reward_manager.name=SearchR1RewardManager",
            f"reward.reward_manager.module.path={reward_path('reward_manager')}",
            f"reward.custom_reward_function.path={reward_path()}",
            "reward.custom_reward_function.name=compute_search_r1_score"]


def test_the_search_r1_manager_in_verls_reward_loop_gives_the_originals_scores(table, launch_overrides,
                                                                                 compose_verl_config, tokenizer):
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.utils.ray_utils import get_event_loop

    from rag_curriculum._metrics import normalize_answer

    trajs, original = table
    # a target the answer normalisation empties (["?!"]) is refused by the toolkit's reward: the
    # rest score as the original
    keep = [i for i, t in enumerate(trajs) if any(normalize_answer(a) for a in t["target"])]
    assert [t["behaviour"] for i, t in enumerate(trajs) if i not in keep] == ["punctuation_only"]
    trajs, original = [trajs[i] for i in keep], [original[i] for i in keep]
    # an alias it empties (["Paris", ""]) is left out of the target: the empty answer the original scores 1.0 is a
    # miss (the one departure, tests/rewards/test_search_r1_reward.py)
    departs = [i for i, t in enumerate(trajs) if t["behaviour"] == "empty_alias"]
    assert len(departs) == 1 and original[departs[0]] == 1.0
    original = [0.0 if i in departs else s for i, s in enumerate(original)]
    cfg = compose_verl_config([*launch_overrides, *_manager_overrides()])
    assert resolve_reward_manager_cls(cfg).__name__ == "SearchR1RewardManager"
    data, lengths = _batch(tokenizer, trajs)
    worker = RewardLoopWorker(copy.deepcopy(cfg))
    outputs = get_event_loop().run_until_complete(worker.compute_score_batch(data))
    assert type(worker.reward_manager).__name__ == "SearchR1RewardManager"
    assert [o["reward_score"] for o in outputs] == original
    assert {k for o in outputs for k in o["reward_extra_info"]} == {"score", "acc", "extracted", "from_prompt"}
    rm = resolve_reward_manager_cls(cfg).assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    for i, n in enumerate(lengths):
        assert rm[i, n - 1].item() == original[i] and rm[i].abs().sum().item() == original[i]
    # reward_kwargs reach it: format_score
    cfg2 = compose_verl_config([*launch_overrides, *_manager_overrides(),
                                "+reward.custom_reward_function.reward_kwargs.format_score=0.1"])
    out2 = get_event_loop().run_until_complete(RewardLoopWorker(cfg2).compute_score_batch(data))
    frozen = json.loads(TABLE.read_text())["trajectories"]
    with_format = [frozen[i]["scores"][1] for i in keep]
    with_format[departs[0]] = 0.1  # the format score of a miss
    assert [o["reward_score"] for o in out2] == pytest.approx(with_format, abs=0)


def test_verls_naive_manager_with_compute_search_r1_score_refuses(table, launch_overrides, compose_verl_config,
                                                                  tokenizer):
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.utils.ray_utils import get_event_loop

    from rag_curriculum.errors import ConfigError
    from rag_curriculum.verl.data import reward_path

    trajs, _ = table
    cfg = compose_verl_config([*launch_overrides, f"reward.custom_reward_function.path={reward_path()}",
                               "reward.custom_reward_function.name=compute_search_r1_score"])
    data, _ = _batch(tokenizer, trajs[:2])
    with pytest.raises(ConfigError, match="handed it the response alone") as e:
        get_event_loop().run_until_complete(RewardLoopWorker(cfg).compute_score_batch(data))
    assert "SearchR1RewardManager" in e.value.hint


def test_built_rows_are_read_by_search_r1s_reward(tmp_path, compose_verl_config, launch_overrides, tokenizer,
                                                   shards):
    """Rows built by the toolkit, read back by verl's own dataset: Search-R1's reward (verl's copy) reads their
    ``ground_truth['target']`` (no KeyError), and gives the toolkit's ``search-r1``
    score on each (prompt rendered, one right, one wrong and one missing answer per row)."""
    from support.search_r1_files import write_search_r1_parquet
    from verl.trainer.ppo.utils import create_rl_dataset

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import shard_files
    from rag_curriculum.verl.rewards import compute_search_r1_score

    src = write_search_r1_parquet(tmp_path / "train.parquet", [("hotpotqa", 6), ("musique", 6)])
    built = tmp_path / "sr1-rows"
    build_curriculum(BuildConfig(sources=[SourceSpec("search-r1", str(src))], template="search-r1-original",
                                 out=str(built)), command="test")
    checked = 0
    for d in (shards, built):
        files = "[" + ",".join(str(f) for f in shard_files(d)) + "]"
        cfg = compose_verl_config([*launch_overrides, f"data.train_files={files}", f"data.val_files={files}",
                                   "data.custom_cls.path=null"])  # verl's own RLHFDataset (12 rows: no 42-row step)
        ds = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
        for i in range(0, len(ds), max(1, len(ds) // 12)):
            item = ds[i]
            gt = item["reward_model"]["ground_truth"]
            assert list(gt["target"]) == list(item["answers"]) or d == built
            prompt = tokenizer.apply_chat_template(list(item["raw_prompt"]), add_generation_prompt=True,
                                                   tokenize=False)
            wrong = "Nobody Inparticular"
            for resp in (f"<think>t</think><answer> {gt['target'][0]} </answer><|im_end|>",
                         f"<answer> {wrong} </answer><|im_end|>", "<think>none</think><|im_end|>"):
                theirs = _verl_em(prompt + resp, gt["target"])  # a KeyError here before the toolkit read both fields
                ours = compute_search_r1_score(item["data_source"], resp, gt, item["extra_info"], prompt_str=prompt)
                if len(re.findall(r"<answer>(.*?)</answer>", prompt + resp, re.S)) > 1:
                    assert theirs == ours["score"], (d.name, i, resp)
                    checked += 1
    assert checked >= 40


def test_the_launch_script_sets_search_r1s_manager(shards, tiny_model_dir, compose_verl_config, tmp_path):
    """REWARD=search-r1 bash recipes/verl/run_search_r1.sh: the command composes under verl's config with the
    toolkit's compute_search_r1_score and SearchR1RewardManager, which verl resolves from its path."""
    import os
    import shlex
    import subprocess
    import sys

    from conftest import ROOT
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    env = {**os.environ, "SHARDS": str(shards), "MODEL": str(tiny_model_dir), "DRY_RUN": "1", "OUT": str(tmp_path),
           "PYTHON": sys.executable, "REWARD": "search-r1"}
    res = subprocess.run(["bash", str(ROOT / "recipes" / "verl" / "run_search_r1.sh")], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    cfg = compose_verl_config(shlex.split(res.stdout)[3:])
    assert cfg.reward.custom_reward_function.name == "compute_search_r1_score"
    assert resolve_reward_manager_cls(cfg).__name__ == "SearchR1RewardManager"
    assert get_custom_reward_fn(cfg).args[0].__name__ == "compute_search_r1_score"
    bad = subprocess.run(["bash", str(ROOT / "recipes" / "verl" / "run_search_r1.sh")], capture_output=True,
                         text=True, env={**env, "REWARD": "nosuch"}, cwd=ROOT)
    assert bad.returncode == 2 and "REWARD=nosuch: search-em or search-r1" in bad.stderr
