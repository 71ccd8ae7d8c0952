"""verl's reward function from a core install: importable, scoring real rows, loadable by path as verl loads it,
without torch, transformers, TRL or vLLM anywhere in the environment."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from rag_curriculum.rewards import RagRlReward
from rag_curriculum.verl.data import hydra_list, reward_path, train_files
from rag_curriculum.verl.rewards import compute_score

ML_STACK = ("torch", "transformers", "trl", "vllm")


def _installed(name: str) -> bool:
    """Importable as a real package: tests/ is on sys.path (pytest's pythonpath), where a folder such as tests/tier_vllm
    would otherwise pass for a namespace package of that name (no origin)."""
    return getattr(importlib.util.find_spec(name), "origin", None) is not None


pytestmark = pytest.mark.skipif(any(_installed(m) for m in ML_STACK),
                                reason="torch / transformers / trl / vllm are installed here: the core tier runs in "
                                       ".venv-core (scripts/setup.sh core)")

# Never imported by `import rag_curriculum` nor by the reward path (and torch, transformers, trl, vllm are not even
# installed here; tokenizers, accelerate, peft, verl and ray would come only with them).
HEAVY = (*ML_STACK, "accelerate", "tokenizers", "peft", "verl", "ray")


def _responses(row: dict) -> dict[str, str]:
    gold = row["gold_labels"]
    non_gold = [p["label"] for p in row["passages"] if p["label"] not in gold and "," not in p["label"]]

    def tagged(answer: str, cited: list[str]) -> str:
        return (f"<reasoning>\nFrom the passages.\n</reasoning>\n<answer>\nFinal answer: {answer}\n"
                f"Supporting passages: {', '.join(cited)}\n</answer>")

    out = {
        "right": tagged(row["answers"][0], gold),
        "right-half-cited": tagged(row["answers"][0], gold[:1]),
        "malformed": f"It is {row['answers'][0]}, see {gold[0]}.",
    }
    if non_gold:
        out["wrong"] = tagged("Nobody Inparticular", non_gold[:1])
    return out


def test_no_ml_stack_installed():
    assert [m for m in HEAVY if _installed(m)] == []


def test_import_and_reward_path_load_no_ml_stack():
    code = (
        "import json, sys\n"
        "import rag_curriculum, rag_curriculum.rewards, rag_curriculum.verl.data\n"
        "from rag_curriculum.verl.rewards import compute_score\n"
        "out = compute_score('musique', '<reasoning></reasoning><answer>Final answer: Paris\\n"
        "Supporting passages: France</answer>', {'answers': ['Paris'], 'gold_labels': ['France']})\n"
        f"print(json.dumps([out['score'], sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r})]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout) == [11.0, []]


def test_compute_score_on_real_rows(core_rows):
    """Every row of the curriculum, four responses each: compute_score (verl's reward, reading ground_truth and
    extra_info.labels) equals RagRlReward computed from the rows' answers, gold_labels and passages columns."""
    reward = RagRlReward(log_components=False)
    assert len(core_rows) == 100 and [r["curriculum_index"] for r in core_rows] == list(range(100))
    seen = set()
    for row in core_rows:
        for kind, text in _responses(row).items():
            got = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
            b = reward.score(text, row["answers"], row["gold_labels"], [p["label"] for p in row["passages"]])
            assert got == {
                "score": b.total, "answer": b.answer, "citation": b.citation, "format": b.format,
                "acc": b.exact_match, "answer_f1": b.answer_f1, "citation_precision": b.citation_precision,
                "citation_recall": b.citation_recall, "citation_f1": b.citation_f1,
                "num_incorrect": float(b.num_incorrect), "format_valid": float(b.format_valid),
                "abstained": float(b.abstained),
            }, (row["id"], kind)
            assert got["abstained"] == 0.0, "no response here gives the abstention answer"
            assert all(type(v) is float for v in got.values())
            # by hand: answer 5 x EM + citation 5 x recall - 2 per wrong label + format +1 / -1
            n_gold = len(set(row["gold_labels"]))
            expected = {"right": 11.0, "right-half-cited": 6.0 + 5.0 / n_gold, "wrong": -1.0, "malformed": -1.0}
            assert got["score"] == pytest.approx(expected[kind]), (row["id"], kind)
            seen.add(kind)
    assert seen == {"right", "right-half-cited", "wrong", "malformed"}


def test_compute_score_loaded_by_path_as_verl_does(core_rows):
    """verl 0.9.1 executes the file at reward.custom_reward_function.path as a module of its own
    (spec_from_file_location under another name), calls it with keyword arguments (adding num_turns and
    rollout_reward_scores to extra_info) and merges reward_kwargs into the call."""
    spec = importlib.util.spec_from_file_location("custom_module_rag_rl", reward_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.compute_score
    assert fn is not compute_score
    row = core_rows[0]
    texts = _responses(row)
    extra = {**row["extra_info"], "num_turns": None, "rollout_reward_scores": {}}
    for text in texts.values():
        assert fn(data_source=row["data_source"], solution_str=text, ground_truth=row["reward_model"]["ground_truth"],
                  extra_info=extra) == compute_score(row["data_source"], text, row["reward_model"]["ground_truth"],
                                                     row["extra_info"])
    malformed = fn(data_source=row["data_source"], solution_str=texts["malformed"],
                   ground_truth=row["reward_model"]["ground_truth"], extra_info=extra, format_penalty=2.0)
    assert malformed["format"] == -2.0


def test_launch_helpers_run_on_a_core_install(core_shards):
    """The two helpers recipes/verl/run_grpo.sh calls for the file lists and the reward path."""
    def helper(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "rag_curriculum.verl", *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    assert helper("reward-path") == reward_path()
    assert helper("train-files", str(core_shards)) == hydra_list(train_files(core_shards))
