"""The RAG-RL reward: values, components, validation, pickling, the TRL calling convention, registries, verl."""

from __future__ import annotations

import importlib.util
import json
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rag_curriculum.rewards as rewards
from rag_curriculum.rewards import (
    REWARDS,
    RagRlAnswerReward,
    RagRlCitationReward,
    RagRlFormatReward,
    RagRlReward,
    RewardBreakdown,
    get_reward,
    register_reward,
)
from rag_curriculum.train import reward_funcs_from_config

ROOT = Path(__file__).resolve().parents[2]
VERL_FILE = ROOT / "src" / "rag_curriculum" / "verl" / "rewards.py"


def completion(answer: str = "Paris", cites: str = "France, Paris", reasoning: str = "Because.") -> str:
    return (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\nFinal answer: {answer}\n"
            f"Supporting passages: {cites}\n</answer>")


ANSWERS = ["Paris", "City of Light"]
GOLD = ["France", "Paris"]
LABELS = ["France", "Paris", "Lyon", "Deh Bagh, Ravansar", "Euro", "Euro (2)"]

# (name, completion, answer, citation, format)  with gamma 5 / 5 / 2 and gamma_format = p = 1
TABLE = [
    ("perfect", completion(), 5.0, 5.0, 1.0),
    ("alias", completion(answer="the city of light"), 5.0, 5.0, 1.0),
    ("wrong answer", completion(answer="Lyon"), 0.0, 5.0, 1.0),
    ("partial answer earns no answer reward", completion(answer="Paris, France"), 0.0, 5.0, 1.0),
    ("half the gold", completion(cites="Paris"), 5.0, 2.5, 1.0),
    ("one wrong citation", completion(cites="France, Paris, Lyon"), 5.0, 3.0, 1.0),
    ("only wrong citations", completion(cites="Lyon, Euro, Euro (2)"), 5.0, -6.0, 1.0),
    ("comma label counts once", completion(cites="France, Deh Bagh, Ravansar"), 5.0, 0.5, 1.0),
    ("unknown citation", completion(cites="France, Paris, Marseille"), 5.0, 3.0, 1.0),
    ("repeated citation", completion(cites="France, France, paris"), 5.0, 5.0, 1.0),
    ("no citations", completion(cites=""), 5.0, 0.0, 1.0),
    ("invalid format keeps the extracted answer", "Sure! " + completion(), 5.0, 5.0, -1.0),
    ("truncated", completion()[:40], 0.0, 0.0, -1.0),
    ("non-English reasoning", completion(reasoning="因为"), 5.0, 5.0, -1.0),
    ("no tags", "Paris", 0.0, 0.0, -1.0),
    ("empty answer", completion(answer=""), 0.0, 5.0, -1.0),
]


@pytest.mark.parametrize(("text", "answer", "citation", "fmt"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_reward_table(text, answer, citation, fmt):
    b = RagRlReward().score(text, ANSWERS, GOLD, LABELS)
    assert isinstance(b, RewardBreakdown)
    assert (b.answer, b.citation, b.format) == pytest.approx((answer, citation, fmt))
    assert b.total == pytest.approx(answer + citation + fmt)
    assert b.format_valid == (fmt > 0)
    assert (b.format_reason is None) == b.format_valid
    assert b.exact_match == answer / 5.0
    assert b.num_incorrect == pytest.approx((b.citation - 5.0 * b.citation_recall) / -2.0)


def test_breakdown_reports_the_metrics():
    b = RagRlReward().score(completion(answer="Paris France", cites="France, Lyon"), ANSWERS, GOLD, LABELS)
    assert b.to_dict() == {
        "total": 0.0 + 0.5 + 1.0, "answer": 0.0, "citation": 0.5, "format": 1.0, "exact_match": 0.0,
        "answer_f1": pytest.approx(2 / 3), "citation_precision": 0.5, "citation_recall": 0.5, "citation_f1": 0.5,
        "num_cited": 2, "num_incorrect": 1, "format_valid": True, "format_reason": None,
        "abstained": False, "answerable": True,
    }


def test_constants_are_configurable():
    r = RagRlReward(gamma_answer=1.0, gamma_correct=2.0, gamma_incorrect=0.5, gamma_format=0.25, format_penalty=3.0)
    b = r.score(completion(cites="France, Lyon"), ANSWERS, GOLD, LABELS)
    assert (b.answer, b.citation, b.format) == (1.0, 2.0 * 0.5 - 0.5, 0.25)
    assert r.score("x", ANSWERS, GOLD).format == -3.0
    short = RagRlReward(max_chars=50).score(completion(), ANSWERS, GOLD)
    assert short.format_reason == "too_long" and short.answer == 5.0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"gamma_answer": -5.0}, "gamma_answer must be a finite number >= 0"),
    ({"format_penalty": -1}, "format_penalty"),
    ({"gamma_format": float("nan")}, "gamma_format"),
    ({"gamma_incorrect": "2"}, "gamma_incorrect"),
    ({"gamma_correct": True}, "gamma_correct"),
    ({"max_chars": 0}, "max_chars must be a positive integer"),
    ({"max_chars": 10.5}, "max_chars"),
])
def test_invalid_constants_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RagRlReward(**kwargs)


def test_unknown_output_format_is_refused_with_a_hint():
    with pytest.raises(KeyError, match="did you mean 'rag-rl'"):
        RagRlReward(output_format="rag_rl")


# --- the TRL calling convention --------------------------------------------------------------------------------
def trl_kwargs(n: int = 2) -> dict:
    """What GRPOTrainer._calculate_rewards passes besides completions: every column, plus its own keywords."""
    logged: dict = {"metrics": {}, "extra": {}}
    return {
        "prompts": [[{"role": "user", "content": "q"}]] * n,
        "completion_ids": [[1, 2, 3]] * n,
        "answers": [ANSWERS] * n,
        "gold_labels": [GOLD] * n,
        "passages": [[{"label": lb, "title": lb, "text": "t", "is_gold": lb in GOLD} for lb in LABELS]] * n,
        "data_source": ["musique"] * n,
        "level": [3] * n,
        "hops": [2] * n,
        "reward_model": [{"style": "rule", "ground_truth": {"answers": ANSWERS, "gold_labels": GOLD}}] * n,
        "extra_info": [{"index": 0, "split": "train", "labels": LABELS}] * n,
        "trainer_state": None,
        "log_metric": lambda name, value: logged["metrics"].__setitem__(name, value),
        "log_extra": lambda name, values: logged["extra"].__setitem__(name, values),
        "_logged": logged,
    }


def test_trl_standard_and_conversational_completions():
    kw = trl_kwargs()
    logged = kw.pop("_logged")
    texts = [completion(), "Sure! " + completion(cites="Lyon")]
    conv = [[{"role": "assistant", "content": t}] for t in texts]
    r = RagRlReward()
    assert r(completions=texts, **kw) == [11.0, 5.0 - 2.0 - 1.0]
    assert r(completions=conv, **kw) == [11.0, 2.0]
    assert logged["metrics"]["rag_rl/answer"] == 5.0
    assert logged["metrics"]["rag_rl/format_valid"] == 0.5
    assert logged["metrics"]["rag_rl/num_incorrect"] == 0.5
    assert set(logged["metrics"]) == {f"rag_rl/{k}" for k in (
        "answer", "citation", "format", "exact_match", "answer_f1", "citation_precision", "citation_recall",
        "citation_f1", "num_incorrect", "format_valid", "abstained")}
    assert logged["extra"]["rag_rl/format_reason"] == ["", "text_outside_tags"]


def test_components_sum_to_the_total_under_trl():
    kw = trl_kwargs(4)
    kw.pop("_logged")
    texts = [completion(), completion(answer="Lyon", cites="Lyon"), "nothing", completion(reasoning="说")]
    parts = [cls()(completions=texts, **kw) for cls in (RagRlAnswerReward, RagRlCitationReward, RagRlFormatReward)]
    total = RagRlReward()(completions=texts, **kw)
    assert [sum(x) for x in zip(*parts, strict=True)] == pytest.approx(total)
    assert [f.__name__ for f in (RagRlReward(), RagRlAnswerReward(), RagRlCitationReward(), RagRlFormatReward())] \
        == ["rag_rl", "rag_rl_answer", "rag_rl_citation", "rag_rl_format"]


def test_columns_fall_back_to_reward_model_and_extra_info():
    gt = {"style": "rule", "ground_truth": {"answers": ["Deh Bagh"], "gold_labels": ["Deh Bagh, Ravansar"]}}
    text = completion(answer="Deh Bagh", cites="Deh Bagh, Ravansar")
    # without passages, the gold labels alone resolve the comma
    assert RagRlReward()([text], reward_model=[gt]) == [11.0]
    b = RagRlReward().components([text], reward_model=[gt], extra_info=[{"labels": LABELS}])[0]
    assert b.citation_recall == 1.0 and b.num_incorrect == 0


def test_arrays_and_tuples_from_parquet_readers_are_accepted():
    np = pytest.importorskip("numpy")
    out = RagRlReward()([completion()], answers=[np.array(ANSWERS)], gold_labels=[tuple(GOLD)],
                        passages=[tuple({"label": lb} for lb in LABELS)])
    assert out == [11.0]


def test_missing_answers_is_a_clear_error():
    with pytest.raises(ValueError, match="needs the gold answers"):
        RagRlReward()([completion()], gold_labels=[GOLD])
    with pytest.raises(ValueError, match="column 'gold_labels'"):
        RagRlReward()([completion()], answers=[ANSWERS], gold_labels=[GOLD, GOLD])


def test_no_logging_without_log_metric_and_when_switched_off():
    calls = []
    RagRlReward(log_components=False)([completion()], answers=[ANSWERS], gold_labels=[GOLD],
                                      log_metric=lambda *a: calls.append(a))
    assert calls == []
    RagRlReward()([completion()], answers=[ANSWERS], gold_labels=[GOLD])  # no log_metric given: fine


# --- pickling and processes ------------------------------------------------------------------------------------
ALL = [RagRlReward(gamma_format=0.5), RagRlAnswerReward(), RagRlCitationReward(), RagRlFormatReward(max_chars=999)]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
def test_rewards_pickle_round_trip(fn):
    clone = pickle.loads(pickle.dumps(fn))
    assert clone == fn and clone.__name__ == fn.__name__
    texts = [completion(), "x"]
    assert clone(texts, answers=[ANSWERS] * 2, gold_labels=[GOLD] * 2) == fn(texts, answers=[ANSWERS] * 2,
                                                                             gold_labels=[GOLD] * 2)


def _score_in_child(fn):
    return fn([completion()], answers=[ANSWERS], gold_labels=[GOLD])


def test_rewards_cross_process_boundaries():
    with ProcessPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(_score_in_child, ALL)) == [[10.5], [5.0], [5.0], [1.0]]


def test_rewards_are_hashable_and_frozen():
    assert len({RagRlReward(), RagRlReward()}) == 1
    with pytest.raises(AttributeError):
        RagRlReward().gamma_answer = 1.0  # type: ignore[misc]


# --- registries ------------------------------------------------------------------------------------------------
def test_reward_registry_names():
    assert [n for n in REWARDS.names() if n.startswith("rag-rl")] == [
        "rag-rl", "rag-rl-answer", "rag-rl-citation", "rag-rl-format"]
    assert type(get_reward("rag-rl-citation", gamma_incorrect=1.0)) is RagRlCitationReward
    with pytest.raises(KeyError, match="did you mean 'rag-rl-format'"):
        get_reward("rag-rl-fromat")


def test_registering_a_reward():
    def make_length_penalty(per_char: float = 0.01):
        return lambda completions, **kw: [-per_char * len(c) for c in completions]

    register_reward("test-length", make_length_penalty)
    try:
        funcs, weights = reward_funcs_from_config([{"name": "test-length", "weight": 0.5, "per_char": 1.0},
                                                   "rag-rl-format"])
        assert funcs[0](["abc"]) == [-3.0]
        assert weights == [0.5, 1.0]
        with pytest.raises(ValueError, match="already registered"):
            register_reward("test-length", make_length_penalty)
    finally:
        REWARDS._entries.pop("test-length")


@pytest.mark.parametrize(("specs", "names", "weights"), [
    ("rag-rl", ["rag_rl"], [1.0]),
    ({"rag-rl-answer": 2, "rag-rl-format": 0.5}, ["rag_rl_answer", "rag_rl_format"], [2.0, 0.5]),
    ({"name": "rag-rl", "kwargs": {"gamma_format": 0.5}}, ["rag_rl"], [1.0]),
    ([{"name": "rag-rl-answer"}, {"name": "rag-rl-citation", "weight": 0.2}, "rag-rl-format"],
     ["rag_rl_answer", "rag_rl_citation", "rag_rl_format"], [1.0, 0.2, 1.0]),
])
def test_reward_funcs_from_config(specs, names, weights):
    funcs, w = reward_funcs_from_config(specs)
    assert [f.__name__ for f in funcs] == names
    assert w == weights


def test_reward_funcs_from_config_errors():
    with pytest.raises(ValueError, match="no reward given"):
        reward_funcs_from_config([])
    with pytest.raises(ValueError, match="needs a 'name'"):
        reward_funcs_from_config([{"weight": 1.0}])
    with pytest.raises(ValueError, match="gamma_format"):
        reward_funcs_from_config([{"name": "rag-rl", "gamma_format": -1}])
    with pytest.raises(TypeError, match="unexpected keyword"):
        reward_funcs_from_config([{"name": "rag-rl", "gama_format": 1}])


def test_reward_funcs_from_hydra_config():
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({"rewards": [{"name": "rag-rl-answer", "weight": 2.0},
                                                  {"name": "rag-rl-format", "kwargs": {"format_penalty": 0.5}}]})
    funcs, weights = reward_funcs_from_config(cfg.rewards)
    assert weights == [2.0, 1.0] and funcs[1].format_penalty == 0.5


def test_trl_accepts_our_reward_functions():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    for fn in ALL:
        assert trl_utils.get_callable_name(fn) == fn.__name__
        assert not trl_utils.is_async_callable(fn)


def test_public_api_is_listed():
    assert sorted(rewards.__all__) == sorted(set(rewards.__all__))
    for name in rewards.__all__:
        assert hasattr(rewards, name), name
    for name in ("parse_completion", "normalize_answer", "exact_match", "answer_f1", "citation_scores", "joint_f1",
                 "aggregate", "RagRlReward", "REWARDS", "get_reward", "get_format", "FORMATS"):
        assert name in rewards.__all__


@pytest.mark.slow
def test_importing_rewards_imports_no_heavy_library():
    code = ("import sys, rag_curriculum.rewards, rag_curriculum.train, rag_curriculum.verl.rewards; "
            "print([m for m in ('torch', 'transformers', 'trl', 'vllm') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_env()).stdout
    assert out.strip() == "[]"


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


# --- verl ------------------------------------------------------------------------------------------------------
def load_verl_module():
    """Load the adapter the way verl does: by file path, under another module name."""
    spec = importlib.util.spec_from_file_location("custom_module", VERL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verl_compute_score_loaded_by_path():
    compute_score = load_verl_module().compute_score
    gt = {"answers": ANSWERS, "gold_labels": GOLD}
    out = compute_score("musique", completion(cites="France, Lyon"), gt, {"index": 3, "labels": LABELS})
    assert out["score"] == 5.0 + 0.5 + 1.0
    assert {k: out[k] for k in ("answer", "citation", "format", "acc", "format_valid")} == {
        "answer": 5.0, "citation": 0.5, "format": 1.0, "acc": 1.0, "format_valid": 1.0}
    assert all(isinstance(v, float) for v in out.values())
    bad = compute_score("musique", "Paris", gt)
    assert set(bad) == set(out), "verl needs the same keys for every response"
    assert bad["score"] == -1.0


def test_verl_reward_kwargs_and_unknown_kwargs():
    compute_score = load_verl_module().compute_score
    gt = {"answers": ANSWERS, "gold_labels": GOLD}
    out = compute_score(data_source="hotpotqa", solution_str="Paris", ground_truth=gt, extra_info=None,
                        format_penalty=3.0, reward_router_address=None, log_components=True)
    assert out["format"] == -3.0
    # a bare answer list as ground truth, and NumPy arrays as verl's batches hold them
    assert compute_score("x", completion(), ["Paris"])["answer"] == 5.0
    np = pytest.importorskip("numpy")
    gt_np = {"answers": np.array(ANSWERS, dtype=object), "gold_labels": np.array(GOLD, dtype=object)}
    assert compute_score("x", completion(), gt_np, {"labels": np.array(LABELS)})["score"] == 11.0


def test_verl_warns_once_about_a_misspelt_constant(caplog):
    """verl passes reward_kwargs and its own keywords together, so unknown names cannot be refused; a misspelt
    constant must at least be reported (once), not silently leave the default in place."""
    import logging

    compute_score = load_verl_module().compute_score
    gt = {"answers": ANSWERS, "gold_labels": GOLD}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            out = compute_score("musique", "Paris", gt, None, gama_format=2.0, format_penalty=3.0,
                                reward_router_address=None, reward_model_tokenizer=None)
    assert out["format"] == -3.0
    warned = [r.getMessage() for r in caplog.records if "gama_format" in r.getMessage()]
    assert len(warned) == 1 and "gamma_format" in warned[0]
    assert not [r for r in caplog.records if "reward_router_address" in r.getMessage()]


def test_verl_module_loads_in_a_fresh_interpreter():
    code = (f"import importlib.util, json; s = importlib.util.spec_from_file_location('m', {str(VERL_FILE)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(json.dumps(m.compute_score('musique', 'x', {'answers': ['a'], 'gold_labels': ['b']})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env(),
                         cwd="/").stdout
    assert json.loads(out)["score"] == -1.0


# --- properties ------------------------------------------------------------------------------------------------
cited_lists = st.lists(st.sampled_from([*LABELS, "Marseille", "euro", ""]), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["Paris", "city of light", "Lyon", "", "yes"]), cited_lists,
       st.sampled_from(["", "Sure! ", "说"]), st.lists(st.sampled_from(LABELS), min_size=1, max_size=3, unique=True))
def test_reward_bounds(answer, cited, prefix, gold):
    r = RagRlReward()
    b = r.score(prefix + completion(answer=answer, cites=", ".join(cited)), ANSWERS, gold, LABELS)
    assert b.answer in (0.0, r.gamma_answer)
    assert b.format in (r.gamma_format, -r.format_penalty)
    assert -r.gamma_incorrect * b.num_cited <= b.citation <= r.gamma_correct
    assert b.total == b.answer + b.citation + b.format
    assert b.total <= r.gamma_answer + r.gamma_correct + r.gamma_format
    assert 0 <= b.num_incorrect <= b.num_cited
    assert b.citation_f1 <= max(b.citation_precision, b.citation_recall) + 1e-12
