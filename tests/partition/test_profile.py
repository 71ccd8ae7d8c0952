"""`curriculum profile` on real MuSiQue rows: a scripted model whose correct samples per question and level are
planted, so every count, pass rate, interval and informative fraction is known; the counts recomputed from the
recorded predictions with the official F1; resuming after a stop; the refusals (a level above K, an empty level,
rows that cannot be shown at other levels, another model in the same --out), each one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.level_oracle import LEVELS, PLANTED, SAMPLES, LevelOracle

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.curricula.adaptive import LevelRenderer
from rag_curriculum.difficulty.profile import informative_probability, read_profile, spread_probability
from rag_curriculum.errors import ProfileError, RunMismatchError, UsageError
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import ProfileConfig, profile
from rag_curriculum.rewards import (
    RagRlCitationReward,
    RagRlFormatReward,
    RagRlReward,
    answer_f1,
    reward_identity,
)
from rag_curriculum.shards import portable, read_manifest, read_rows


@pytest.fixture(scope="module")
def adaptive_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("adaptive") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(out), seed=0), command="curriculum build (test)")
    return out


def make(adaptive_dir, out, **kw) -> ProfileConfig:
    return ProfileConfig(shards=str(adaptive_dir), out=str(out), backend="scripted", samples=SAMPLES,
                         levels=",".join(map(str, LEVELS)), chunk_size=5, **kw)


def test_the_profile_counts_every_planted_sample_and_the_official_f1_recounts_them(adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    res = profile(make(adaptive_dir, out, group_size=4), backend=ScriptedBackend(script=LevelOracle(adaptive_dir)))
    assert res.complete
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    rows = read_rows(adaptive_dir)
    assert [(r["question"], r["level"]) for r in lines] == [(q, lv) for q in range(len(PLANTED)) for lv in LEVELS]
    for r in lines:
        planted = PLANTED[r["question"]][LEVELS.index(r["level"])]
        answers = rows[r["question"]]["answers"]
        assert r["id"] == rows[r["question"]]["id"] and len(r["completions"]) == SAMPLES
        assert r["c"] == planted == sum(answer_f1(p, answers) >= 1.0 for p in r["predictions"])
        assert r["pass_rate"] == planted / SAMPLES
        pool = rows[r["question"]]["pool_size"]
        assert r["num_distractors"] == min(max(r["level"] + 2 - r["hops"], 0), pool)
    summary = json.loads((out / "profile.json").read_text())
    assert summary["kind"] == "level-profile" and summary["levels"] == LEVELS and summary["paired_questions"] == 6
    for i, lv in enumerate(LEVELS):
        fig = summary["per_level"][str(lv)]
        rates = [c[i] / SAMPLES for c in PLANTED]
        assert fig["pass_rate"] == pytest.approx(sum(rates) / len(rates), abs=1e-6)
        assert fig["informative"] == pytest.approx(
            sum(1 - p ** 4 - (1 - p) ** 4 for p in rates) / len(rates), abs=1e-6)
        assert fig["pass_rate_ci"][0] <= fig["pass_rate"] <= fig["pass_rate_ci"][1]
        assert fig["change"] == pytest.approx(fig["pass_rate"] - summary["per_level"]["1"]["pass_rate"], abs=2e-6)
    assert summary["per_level"]["8"]["change_ci"][1] < 0, "the planted drop from level 1 to 8 is outside the noise"
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    prof = read_profile(out)
    assert prof.pass_rate(rows[0]["id"], 4) == (0.5, True)
    assert prof.pass_rate("musique-unseen", 4)[0] == pytest.approx(sum(c[2] for c in PLANTED) / 24)
    assert prof.pass_rate(rows[0]["id"], 6) == (pytest.approx((0.5 + 0.0) / 2), True), "between levels 4 and 8"


def test_the_expected_informative_fraction_is_its_closed_form_on_planted_pass_rates():
    for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        for g in (1, 2, 7, 16):
            assert informative_probability(p, g) == pytest.approx(1 - p ** g - (1 - p) ** g if g > 1 else 0.0)
    assert informative_probability(0.5, 7) == pytest.approx(1 - 2 / 128)


def test_a_stopped_profile_continues_to_the_same_files(adaptive_dir, tmp_path):
    oracle = LevelOracle(adaptive_dir)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    profile(make(adaptive_dir, whole), backend=ScriptedBackend(script=oracle))
    first = profile(make(adaptive_dir, parts), backend=ScriptedBackend(script=oracle), max_chunks=2)
    assert not first.complete and not (parts / "profile.json").exists()
    again = profile(make(adaptive_dir, parts), backend=ScriptedBackend(script=oracle))
    assert again.complete and again.run.generated_chunks == 3
    assert (parts / "profile.parquet").read_bytes() == (whole / "profile.parquet").read_bytes()
    a, b = (json.loads((d / "profile.json").read_text()) for d in (whole, parts))
    assert {k: v for k, v in a.items() if k != "config"} == {k: v for k, v in b.items() if k != "config"}


def test_another_model_in_the_same_out_is_refused_naming_it(adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    profile(make(adaptive_dir, out), backend=ScriptedBackend(script=LevelOracle(adaptive_dir)))
    before = sorted(p.name for p in (out / "work").iterdir())
    other = make(adaptive_dir, out, model="other-model")
    with pytest.raises(RunMismatchError, match="other-model"):
        profile(other)
    assert sorted(p.name for p in (out / "work").iterdir()) == before


@pytest.mark.parametrize(("levels", "message"), [
    ("1,2,9", "level 9 is outside 1..K (K = 8)"),
    ("1,,4", "an empty level"),
    ("1,two", "'two' is not a level"),
])
def test_bad_levels_are_refused_before_anything_is_written(adaptive_dir, tmp_path, levels, message):
    out = tmp_path / "profile"
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        profile(ProfileConfig(shards=str(adaptive_dir), out=str(out), backend="scripted", levels=levels))
    assert not out.exists()


def test_the_command_refuses_a_level_above_K_and_rows_of_one_level_in_one_line(adaptive_dir, tmp_path, min_max_shards):
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "scripted", "--levels", "1,30", "--out", out)
    assert "level 30 is outside 1..K (K = 8)" in one_error(r, 2)
    r = run("profile", min_max_shards, "--backend", "scripted", "--out", out)
    assert "not an adaptive one" in one_error(r)
    assert not out.exists()


@pytest.mark.slow
def test_the_command_profiles_a_real_model_and_a_build_reads_the_profile(tiny_model_dir, tmp_path):
    """Through the real command line with real generation (a tiny random model on the CPU, transformers): the
    profile's counts recomputed from its predictions with the official F1, the summary's figures from its lines,
    then `curriculum build --profile` and `--schedule calibrated` on it."""
    from rag_curriculum.difficulty.profile import informative_probability as f

    out = tmp_path / "profile"
    r = run("profile", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--n", 3, "--K", 4, "--backend",
            "transformers", "--model", tiny_model_dir, "--device", "cpu", "--samples", 3, "--max-tokens", 12,
            "--temperature", 1.0, "--group-size", 3, "--out", out)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "pass rate and reward rag-rl per level over 3 questions x 3 samples" in text
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    rows = {row["id"]: row for row in read_rows(out / "input")}
    assert [(x["question"], x["level"]) for x in lines] == [(q, lv) for q in range(3) for lv in (1, 2, 4)]
    assert len({c for x in lines for c in x["completions"]}) > 3, "real, varied samples"
    for x in lines:
        answers = rows[x["id"]]["answers"]
        assert x["c"] == sum(answer_f1(p, answers) >= 1.0 for p in x["predictions"]) and x["n"] == 3
    summary = json.loads((out / "profile.json").read_text())
    for lv in (1, 2, 4):
        rates = [x["pass_rate"] for x in lines if x["level"] == lv]
        fig = summary["per_level"][str(lv)]
        assert fig["pass_rate"] == pytest.approx(sum(rates) / 3, abs=1e-6)
        assert fig["informative_pass_rate"] == pytest.approx(sum(f(p, 3) for p in rates) / 3, abs=1e-6)
        assert fig["informative"] == pytest.approx(
            sum(spread_probability(x["sample_reward"], 3) for x in lines if x["level"] == lv) / 3, abs=1e-6)
        for x in lines:
            if x["level"] == lv:
                assert x["sample_reward"] == recompute(out / "input", x, RagRlReward())
    assert summary["generation"]["fingerprint"]["generation"]["backend"] == "transformers"
    built = tmp_path / "calibrated"
    r = run("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 3, "--K", 4, "--schedule", "calibrated",
            "--profile", out, "-o", built)
    assert r.exit_code == 0, r.output
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["profile"]["calibrated"]["own_rate"] == 3 and manifest["profile"]["group_size"] == 3


class CitingOracle:
    """Never right, but citing the question's gold passages in every other sample (the rest cite a wrong one): the
    answer never varies, the RAG-RL citation term does."""

    def __init__(self, shards: Path) -> None:
        rows = read_rows(shards)
        renderer = LevelRenderer(read_manifest(shards))
        self.gold = {}
        for row in rows:
            for r in renderer.render([row] * len(LEVELS), LEVELS):
                self.gold[r["prompt"][-1]["content"]] = r["gold_labels"]

    def __call__(self, messages, n, seed):
        gold = self.gold[messages[-1]["content"]]
        cited = [", ".join(gold) if j % 2 == 0 else "nowhere" for j in range(n)]
        return [f"<reasoning>\nr\n</reasoning>\n<answer>\nFinal answer: zzzq\nSupporting passages: {c}\n</answer>"
                for c in cited]


def recompute(adaptive_dir, line, reward):
    """A line's samples scored again from its recorded completions, the question rendered at the line's level."""
    row = read_rows(adaptive_dir)[line["question"]]
    rendered = LevelRenderer(read_manifest(adaptive_dir)).render([row], [line["level"]])[0]
    columns = {k: [v] * len(line["completions"]) for k, v in rendered.items() if k != "prompt"}
    return reward(completions=line["completions"], **columns)


def test_recorded_rewards_recompute_from_recorded_completions_and_predict_what_the_pass_rate_cannot(
        adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    profile(make(adaptive_dir, out, group_size=4), backend=ScriptedBackend(script=CitingOracle(adaptive_dir)))
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    summary = json.loads((out / "profile.json").read_text())
    assert summary["reward"]["source"] == "recipe rag-rl-min-max"
    assert summary["reward"]["identity"] == reward_identity([{"name": "rag-rl", "kwargs": {"gamma_format": 1.0}}])
    reward = RagRlReward()
    for line in lines:
        assert line["sample_reward"] == recompute(adaptive_dir, line, reward)
        terms = dict(line["sample_components"])
        breakdowns = reward.components(line["completions"], [read_rows(adaptive_dir)[line["question"]]["answers"]]
                                       * SAMPLES)
        assert terms["rag_rl/answer"] == [b.answer for b in breakdowns] == [0.0] * SAMPLES
        assert len(set(terms["rag_rl/citation"])) == 2, "gold cited, then a wrong one"
        assert line["pass_rate"] == 0.0
        assert line["informative"] == pytest.approx(spread_probability(line["sample_reward"], 4))
    for lv in LEVELS:
        fig = summary["per_level"][str(lv)]
        mine = [x for x in lines if x["level"] == lv]
        assert fig["informative_pass_rate"] == 0.0, "the answer is never right: the pass rate predicts nothing"
        assert fig["informative"] == pytest.approx(sum(x["informative"] for x in mine) / len(mine), abs=1e-6)
        assert fig["informative"] == pytest.approx(1 - 2 / 2 ** 4, abs=1e-6), "two reward values, half each"
        assert fig["components"]["rag_rl/citation"]["informative"] == pytest.approx(fig["informative"], abs=1e-6)
        assert fig["components"]["rag_rl/answer"]["informative"] == 0.0
        assert fig["components"]["rag_rl/format"]["informative"] == 0.0
        assert fig["reward"] == pytest.approx(sum(x["reward"] for x in mine) / len(mine), abs=1e-6)
    prof = read_profile(out)
    row_id = lines[0]["id"]
    assert prof.has_rewards and prof.row_informative(row_id, 1, 4) == pytest.approx(lines[0]["informative"])


def test_a_named_reward_scores_the_samples_with_its_weights(adaptive_dir, tmp_path):
    out = tmp_path / "profile"
    profile(make(adaptive_dir, out, reward="rag-rl-citation:2,rag-rl-format"),
            backend=ScriptedBackend(script=CitingOracle(adaptive_dir)))
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    citation, fmt = RagRlCitationReward(), RagRlFormatReward()
    for line in lines[:4]:
        expected = [2 * c + f for c, f in zip(recompute(adaptive_dir, line, citation),
                                              recompute(adaptive_dir, line, fmt), strict=True)]
        assert line["sample_reward"] == pytest.approx(expected)
        assert sorted(dict(line["sample_components"])) == ["rag_rl_citation", "rag_rl_format"]
    summary = json.loads((out / "profile.json").read_text())
    assert summary["reward"]["source"] == "--reward rag-rl-citation:2,rag-rl-format"
    assert summary["reward"]["components"] == ["rag_rl_citation", "rag_rl_format"]
    prof = read_profile(out)
    assert prof.differences(rewards=reward_identity("rag-rl")) == [
        "the profile scored the reward 2 x rag-rl-citation + rag-rl-format, not rag-rl"]
    assert prof.differences(rewards=reward_identity([{"name": "rag-rl-citation", "weight": 2.0},
                                                     "rag-rl-format"])) == []
    assert prof.differences(sampling={"temperature": 0.7, "group_size": 7, "top_p": 1.0}) == [
        "temperature 1.0 in the profile, 0.7 here"]
    with pytest.raises(ProfileError, match="the profile scored the reward .*, not rag-rl; temperature 1.0 in the profile, 0.7 here"):
        prof.check_use(rewards=reward_identity("rag-rl"), sampling={"temperature": 0.7})


def test_sampling_defaults_come_from_the_recipe_and_an_override_is_announced(adaptive_dir, tmp_path, caplog):
    cfg = make(adaptive_dir, tmp_path / "p", recipe="rag-rl-min-max", temperature=0.25).resolve()
    assert (cfg.top_p, cfg.max_tokens, cfg.group_size, cfg.max_spread) == (1.0, 800, 7, 0.0)
    assert "temperature 0.25; recipe rag-rl-min-max trains with 1.0" in caplog.text
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("defaults:\n  - _base\n  - _self_\ncurriculum: max\ngrpo:\n  num_generations: 5\n"
                      "  temperature: 0.9\ndynamic:\n  enabled: true\n  max_spread: 0.5\n")
    cfg = make(adaptive_dir, tmp_path / "q", recipe=str(recipe)).resolve()
    assert (cfg.temperature, cfg.group_size, cfg.max_spread) == (0.9, 5, 0.5)


@pytest.mark.parametrize(("flags", "message"), [
    (["--reward", "rag-rl-answr"], "unknown reward 'rag-rl-answr'; did you mean 'rag-rl-answer'?"),
    (["--reward", "rag-rl-answer:two"], "the weight 'two' of rag-rl-answer is not a number"),
    (["--reward", "rag-rl,"], "an empty reward name"),
    (["--recipe", "rag-rl-min-mux"], "rag-rl-min-mux"),
])
def test_an_unknown_reward_or_weight_is_refused_in_one_line_and_nothing_is_written(adaptive_dir, tmp_path, flags,
                                                                                   message):
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "scripted", *flags, "--out", out)
    assert message in one_error(r, 2)
    assert not out.exists()


@pytest.mark.parametrize(("rewards", "said"), [
    ("[{name: rag-rl, weight: .nan}]", "rewards.0.weight = nan is not a finite number"),
    ("[{name: rag-rl, weight: .inf}]", "rewards.0.weight = inf is not a finite number"),
    ("[{name: rag-rl-answer, weight: 1}, {name: rag-rl, weight: 1.0e+308}]",
     "rewards.1.weight = 1e+308 is outside -1e+06..1e+06 (a weighted sum of rewards would overflow)"),
    ("[{name: rag-rl, weight: abc}]", "rewards.0.weight = 'abc' is not a number (a str)"),
    ("[{name: rag-rl, kwargs: {gamma_answer: .nan}}]", "rewards.0.kwargs.gamma_answer = nan: not a finite number"),
    ("[{name: rag-rl, kwargs: {gamma_answer: 1.0e+300}}]", "gamma_answer must be a finite number >= 0 and at most"),
])
def test_a_recipe_weight_that_is_not_a_finite_number_is_refused_naming_the_recipe_and_key(adaptive_dir, tmp_path,
                                                                                        rewards, said):
    """Scored, a NaN weight made every sample's reward 0 (TRL's nansum) and profile.json a mean reward and an
    informative fraction of 0.0 at every level, exit 0; now refused in one line before anything is written."""
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(f"defaults: [rag-rl-min-max, _self_]\nrewards: {rewards}\n")
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "scripted", "--recipe", recipe, "--out", out)
    line = one_error(r, 2)
    assert line.startswith("error: recipe ") and "mine.yaml: " in line and said in line, line
    assert not out.exists()


@pytest.mark.parametrize(("flag", "said"), [
    ("rag-rl:nan", "the weight 'nan' of rag-rl is not a finite number"),
    ("rag-rl:-inf", "the weight '-inf' of rag-rl is not a finite number"),
    ("rag-rl:1e308,rag-rl:1e308", "the weight '1e308' of rag-rl is outside -1e+06..1e+06"),
])
def test_a_reward_flag_weight_that_is_not_a_finite_number_is_refused(adaptive_dir, tmp_path, flag, said):
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "scripted", "--reward", flag, "--out", out)
    assert said in one_error(r, 2)
    assert not out.exists()


def test_an_old_profile_without_rewards_reads_as_pass_fail_said_once(adaptive_dir, tmp_path, caplog):
    out = tmp_path / "profile"
    profile(make(adaptive_dir, out, group_size=4), backend=ScriptedBackend(script=LevelOracle(adaptive_dir)))
    table = pq.read_table(out / "profile.parquet")
    old = table.drop_columns(["sample_reward", "sample_components", "reward", "informative"])
    pq.write_table(old, out / "profile.parquet")
    summary = json.loads((out / "profile.json").read_text())
    del summary["table_sha256"]  # as a profile of that time: its table unhashed, its samples unscored
    (out / "profile.json").write_text(json.dumps(summary))
    first, again = read_profile(out), read_profile(out)
    assert caplog.text.count("a profile without rewards") == 1
    assert not first.has_rewards and first.reward_identity is not None  # its summary still names the reward
    row_id = table.column("id")[0].as_py()
    p = first.pass_rate(row_id, 4)[0]
    assert again.row_informative(row_id, 4, 4) == pytest.approx(informative_probability(p, 4))


class SearchR1Oracle(LevelOracle):
    """The planted pass rates of :class:`LevelOracle`, answered in Search-R1's format (``<answer> X </answer>``)."""

    def __call__(self, messages, n, seed):
        c, answer = self.by_prompt[messages[-1]["content"]]
        return [f"<think> r </think>\n<answer> {answer if j < c else 'zzzq'} </answer>" for j in range(n)]


@pytest.fixture(scope="module")
def wordlevel_dir(tmp_path_factory, shared_data) -> Path:
    """A tiny random model whose (WordLevel) tokenizer reads the words it does not know as [UNK]."""
    pytest.importorskip("transformers", reason="the `train` extra is needed for real-model tests")
    from support.tiny_model import build_wordlevel_model

    return build_wordlevel_model(tmp_path_factory.mktemp("wordlevel") / "m", shared_data)


def recompute_with_prompt(shards, line, reward):
    """:func:`recompute` with the rendered prompt handed to the reward too (TRL's ``prompts``)."""
    row = read_rows(shards)[line["question"]]
    rendered = LevelRenderer(read_manifest(shards)).render([row], [line["level"]])[0]
    n = len(line["completions"])
    columns = {k: [v] * n for k, v in rendered.items() if k != "prompt"}
    chats = [[{"role": "assistant", "content": c}] for c in line["completions"]]
    return reward(completions=chats, prompts=[rendered["prompt"]] * n, **columns)


@pytest.mark.slow  # builds a tiny model and loads its tokenizer (transformers)
def test_the_search_r1_reward_decodes_with_the_profiled_models_tokenizer_as_training_does(adaptive_dir, wordlevel_dir,
                                                                                          tmp_path):
    """Training hands search-r1 the trained model's tokenizer (it scores the prompt and completion decoded
    together); the profile hands it the profiled model's, so its recorded rewards are training's. This model's
    tokenizer reads a gold answer's unknown words as [UNK]: those right answers score 0 as training scores them."""
    from rag_curriculum.methods.search_r1 import SearchR1Reward

    out = tmp_path / "profile"
    cfg = ProfileConfig(shards=str(adaptive_dir), out=str(out), backend="transformers", model=str(wordlevel_dir),
                        samples=SAMPLES, levels=",".join(map(str, LEVELS)), chunk_size=5, group_size=4,
                        reward="search-r1")
    profile(cfg, backend=ScriptedBackend(script=SearchR1Oracle(adaptive_dir)))  # the samples planted
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    trained, untokenized = SearchR1Reward(tokenizer=str(wordlevel_dir)), SearchR1Reward()
    differ = 0
    for line in lines:
        assert line["sample_reward"] == recompute_with_prompt(adaptive_dir, line, trained)
        differ += line["sample_reward"] != recompute_with_prompt(adaptive_dir, line, untokenized)
        assert dict(line["sample_components"])["search_r1/score"] == line["sample_reward"]
    assert differ, "the model's tokenizer should turn some right answers wrong, as in training"
    assert {v for x in lines for v in x["sample_reward"]} == {0.0, 1.0}, "some gold answers are its known words"
    summary = json.loads((out / "profile.json").read_text())
    assert summary["reward"]["tokenizer"] == portable(str(wordlevel_dir), out), "recorded as the model's path is"
    assert summary["reward"]["identity"] == reward_identity("search-r1"), "the reward training names: no difference"
    assert read_profile(out).differences(rewards=reward_identity([{"name": "search-r1"}])) == []


@pytest.mark.slow  # loads transformers
def test_a_reward_whose_tokenizer_does_not_load_is_refused_before_anything_is_generated(adaptive_dir, tmp_path):
    empty = tmp_path / "no-tokenizer"
    empty.mkdir()
    out = tmp_path / "profile"
    r = run("profile", adaptive_dir, "--backend", "transformers", "--model", empty, "--reward", "search-r1",
            "--out", out)
    line = one_error(r, 2)
    assert f"--reward search-r1: the search_r1 reward decodes with the model's tokenizer, as training does, and " \
           f"'{empty}' has none that loads" in line
    assert not out.exists()


@pytest.mark.slow
def test_the_command_profiles_a_real_model_with_the_search_r1_reward(tiny_model_dir, tmp_path):
    """Real generation (the tiny random model, transformers, CPU) scored with search-r1 and the model's tokenizer:
    every recorded reward recomputed from its completion with that reward and tokenizer."""
    from rag_curriculum.methods.search_r1 import SearchR1Reward

    out = tmp_path / "profile"
    r = run("profile", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--n", 2, "--K", 2, "--levels", "1,2",
            "--backend", "transformers", "--model", tiny_model_dir, "--device", "cpu", "--samples", 2,
            "--max-tokens", 8, "--temperature", 1.0, "--group-size", 2, "--reward", "search-r1", "--out", out)
    assert r.exit_code == 0, r.output
    lines = pq.read_table(out / "profile.parquet").to_pylist()
    assert len(lines) == 4 and len({c for x in lines for c in x["completions"]}) > 1, "real, varied samples"
    reward = SearchR1Reward(tokenizer=str(tiny_model_dir))
    for line in lines:
        assert line["sample_reward"] == recompute_with_prompt(out / "input", line, reward)
    summary = json.loads((out / "profile.json").read_text())
    assert summary["reward"]["tokenizer"] == portable(str(tiny_model_dir), out)
    assert summary["reward"]["source"] == "--reward search-r1"
