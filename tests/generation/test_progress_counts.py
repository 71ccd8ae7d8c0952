"""Progress that moves: completions count as the backend reports them, before its call (a batch) returns, with a
rate and a time left from the first ones, or from the first tokens where the backend says how far its unfinished
sequences are; without a terminal, a heartbeat line in the log every HEARTBEAT_SECONDS; the transformers backend
reports each sequence that ends early (an end-of-sequence token or a stop string) as it ends, and its tokens so far
at every step."""

from __future__ import annotations

import logging
import time

import pytest

from rag_curriculum.generation import SamplingConfig, runner
from rag_curriculum.generation._base import report_progress, report_working


def m(text):
    return [{"role": "user", "content": text}]


class SlowEngine:
    """A fake engine: one call is one batch; it reports its completions one at a time, and before the batch
    returns it runs ``during(reported)`` (what the test looks at while the batch is still in flight)."""

    name = "slow-engine"

    def __init__(self, during, per_batch: int = 3):
        self.during, self.per_batch = during, per_batch

    def generate(self, prompts, sampling):
        for _ in range(self.per_batch):
            time.sleep(0.02)
            report_progress(self, 0, 1)  # a completion finished, its prompt's others not yet
        self.during(self.per_batch)
        return [[f"a{j}" for j in range(sampling.n)] for _ in prompts]


def test_the_count_moves_before_the_first_batch_completes(tmp_path, monkeypatch, runner_bars):
    bars = runner_bars
    seen: list = []

    def during(reported):
        bar = bars[0]
        main = next(t for t in bar.progress.tasks if "q" in t.fields)
        seen.append((reported, main.completed, main.fields["q"], main.time_remaining, bar.status()))

    ids = [f"q{i}" for i in range(4)]
    report = runner.run_chunks(tmp_path / "work", ids=ids, prompts=[m(i) for i in ids], backend=SlowEngine(during),
                               sampling=SamplingConfig(n=3), fingerprint={"t": 1}, chunk_size=64, progress=True)
    assert report.complete and report.completions == 12
    (reported, completed, questions, eta, status) = seen[0]
    # 3 completions counted while the one batch is in flight, no question done yet; a time left from them
    assert (reported, completed, questions) == (3, 3, 0)
    assert eta is not None and eta > 0
    assert status.startswith("0/4 questions, 3/12 completions (") and "eta " in status and "eta -" not in status
    main = next(t for t in bars[0].progress.tasks if "q" in t.fields)
    assert main.completed == 12 and main.fields["q"] == 4  # the batch's return settles the count


def test_a_heartbeat_line_every_period_without_a_terminal(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(runner, "HEARTBEAT_SECONDS", 0.05)
    monkeypatch.setattr(runner, "_is_terminal", lambda stream: False)  # a log file or a pipe
    caplog.set_level(logging.INFO, logger=runner.log.name)

    def beats():
        return [r.getMessage() for r in caplog.records if "completions (" in r.getMessage()]

    def during(reported):
        deadline = time.monotonic() + 10
        while len(beats()) < 2 and time.monotonic() < deadline:  # the batch is still in flight
            time.sleep(0.01)

    ids = [f"q{i}" for i in range(4)]
    runner.run_chunks(tmp_path / "work", ids=ids, prompts=[m(i) for i in ids], backend=SlowEngine(during, 2),
                      sampling=SamplingConfig(n=2), fingerprint={"t": 1}, chunk_size=64, progress=False,
                      description="slow run")
    lines = beats()
    assert len(lines) >= 2, caplog.text
    assert lines[0].startswith("slow run: 0/4 questions, 2/8 completions (") and "completions/s)" in lines[0]
    assert " elapsed, eta " in lines[0] and "eta -" not in lines[0]
    time.sleep(0.2)
    assert len(beats()) == len(lines)  # the heartbeat stops with the run


def test_no_heartbeat_on_a_terminal(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(runner, "HEARTBEAT_SECONDS", 0.01)
    monkeypatch.setattr(runner, "_is_terminal", lambda stream: True)
    caplog.set_level(logging.INFO, logger=runner.log.name)
    ids = ["a", "b"]
    runner.run_chunks(tmp_path / "work", ids=ids, prompts=[m(i) for i in ids],
                      backend=SlowEngine(lambda r: time.sleep(0.1)), sampling=SamplingConfig(n=2),
                      fingerprint={"t": 1}, chunk_size=64, progress=False)
    assert "completions (" not in caplog.text


def test_transformers_counts_each_sequence_as_it_ends():
    torch = pytest.importorskip("torch")
    from rag_curriculum.generation._base import listening
    from rag_curriculum.generation._hf_backend import FinishedCount

    source, got = object(), []
    count = FinishedCount(source, eos=[9, 7], start=2, per_row=1)
    steps = [[[1, 2, 3], [1, 2, 9], [0, 9, 4]],  # row 1 ends; row 2's 9 is in its prompt (before start)
             [[1, 2, 3, 5], [1, 2, 9, 0], [0, 9, 4, 7]],  # row 2 ends on the other end-of-sequence token
             [[1, 2, 3, 5, 6], [1, 2, 9, 0, 0], [0, 9, 4, 7, 0]]]  # nothing new
    with listening(source, lambda p, c: got.append((p, c))):
        for ids in steps:
            stop = count(torch.tensor(ids), None)
            assert stop.tolist() == [False, False, False]  # it never stops a row itself
    assert got == [(0, 1), (0, 1)] and count.rows == 2
    greedy = FinishedCount(source, eos=[9], start=2, per_row=4)  # a greedy row stands for n = 4 samples
    with listening(source, lambda p, c: got.append((p, c))):
        greedy(torch.tensor([[1, 2, 9]]), None)
    assert got[-1] == (0, 4)


class TokenEngine:
    """A fake engine that generates its one batch token by token: it says how far its sequences are (as the
    transformers backend does at every step) and finishes none of them until the batch returns."""

    name = "token-engine"

    def __init__(self, during, steps: int = 4):
        self.during, self.steps = during, steps

    def generate(self, prompts, sampling):
        rows = len(prompts) * sampling.n
        for step in range(1, self.steps + 1):
            time.sleep(0.02)
            report_working(self, rows * step / (2 * self.steps))  # half-way through the token limit at the end
        self.during()
        report_working(self, 0.0)
        return [[f"a{j}" for j in range(sampling.n)] for _ in prompts]


def test_a_rate_and_a_time_left_from_the_first_tokens_before_any_completion(tmp_path, monkeypatch, runner_bars):
    """No completion has finished, but the tokens so far give a rate and a time left (the count stays at 0: it
    counts completions)."""
    bars = runner_bars
    seen: list = []

    def during():
        bar = bars[0]
        main = next(t for t in bar.progress.tasks if "q" in t.fields)
        seen.append((bar.done, main.completed, main.time_remaining, bar.status()))

    ids = [f"q{i}" for i in range(4)]
    report = runner.run_chunks(tmp_path / "work", ids=ids, prompts=[m(i) for i in ids], backend=TokenEngine(during),
                               sampling=SamplingConfig(n=2), fingerprint={"t": 1}, chunk_size=64, progress=True)
    assert report.complete and report.completions == 8
    done, completed, eta, status = seen[0]
    assert done == 0 and completed == pytest.approx(4.0)  # 8 sequences half-way: 4 completions' worth of work
    assert eta is not None and eta > 0
    assert status.startswith("0/4 questions, 0/8 completions (") and "eta -" not in status, status
    main = next(t for t in bars[0].progress.tasks if "q" in t.fields)
    assert main.completed == 8  # the batch's return settles it: the gauge is gone, the completions counted


def _tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["Final answer: Paris\n\nQuestion: where?"] * 20, trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def test_transformers_counts_a_sequence_ended_by_a_stop_string_as_it_ends():
    """transformers' own StopStringCriteria (what ``stop_strings`` makes), moved inside the counter: a row ended by
    the stop string counts at the step it ends (the base models' usual end: Gemma's completions end at the next
    ``Question:``, not at an end-of-sequence token), the criterion still stops it, and every step says how far the
    unfinished rows are."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from rag_curriculum.generation._base import listening
    from rag_curriculum.generation._hf_backend import progress_criteria, stop_kwargs

    tok = _tiny_tokenizer()
    prompt = tok("Final answer:")["input_ids"]
    ended = tok(" Paris\n\nQuestion:")["input_ids"]
    going = tok(" Paris Paris Paris Paris Paris")["input_ids"][:len(ended)]
    start = len(prompt)
    stopping, counter = progress_criteria(object(), stop_kwargs(tok, ["\n\nQuestion:"], start), tok, eos=[],
                                          start=start, per_row=3, max_new_tokens=4 * len(ended))
    assert set(stopping) == {"stopping_criteria"}  # the stop strings are inside the counter now
    source = counter.source
    got, work = [], []
    with listening(source, lambda p, c: got.append((p, c)), work.append):
        for k in range(1, len(ended) + 1):
            ids = torch.tensor([prompt + ended[:k], prompt + going[:k]])
            stop = stopping["stopping_criteria"](ids, None)
            assert stop.tolist() == [k == len(ended), False]  # the stop string stops its row, as generate's would
    assert got == [(0, 3)] and counter.rows == 1  # one row (n = 3 samples each) counted the step it ended
    assert work[0] == pytest.approx(2 * 3 * 1 / (4 * len(ended)))  # both rows one token in
    assert work[-1] == pytest.approx(1 * 3 * len(ended) / (4 * len(ended)))  # the one still going
