"""The chunked runner (generation/runner.py) with scripted backends: chunk layout, atomic flushes, resumption,
sharding, seeds, refusal of other runs' work directories, too-long prompts, streaming backends."""

from __future__ import annotations

import random
import re

import pyarrow.parquet as pq
import pytest

from rag_curriculum.errors import CurriculumError
from rag_curriculum.generation import IdenticalSamplesError, PromptTooLongError, SamplingConfig
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.generation.runner import (
    CHUNK_SCHEMA,
    ChunkPlan,
    IncompleteRunError,
    RunMismatchError,
    WorkDir,
    question_seed,
    read_completions,
    run_chunks,
)

N_ITEMS = 11
IDS = [f"q{i:02d}" for i in range(N_ITEMS)]
PROMPTS = [[{"role": "user", "content": f"question {i}"}] for i in range(N_ITEMS)]
SAMPLING = SamplingConfig(n=3, temperature=1.0, max_tokens=16, seed=7)


def sampled(messages, n, seed):
    """Completions that depend only on the prompt and its seed, like a seeded sampler."""
    r = random.Random(seed)
    return [f"{messages[-1]['content']}|{r.randrange(10**6)}" for _ in range(n)]


def backend(**kw):
    return ScriptedBackend(script=sampled, **kw)


def run(work, b=None, **kw):
    kw.setdefault("chunk_size", 3)
    return run_chunks(work, ids=IDS, prompts=PROMPTS, backend=b or backend(), sampling=SAMPLING,
                      fingerprint={"model": "scripted"}, **kw)


def chunk_bytes(work):
    return {p.name: p.read_bytes() for p in sorted(work.glob("chunk-*.parquet"))}


def test_chunk_plan():
    p = ChunkPlan(11, 3, num_shards=2, shard_index=0)
    assert p.num_chunks == 4 and p.shard_chunks() == [0, 2]
    assert [list(p.positions(k)) for k in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10]]
    assert ChunkPlan(0, 5).num_chunks == 0
    assert ChunkPlan(11, 3, num_shards=2, shard_index=1).shard_chunks() == [1, 3]
    for bad in (dict(chunk_size=0), dict(num_shards=0), dict(num_shards=2, shard_index=2)):
        with pytest.raises(ValueError):
            ChunkPlan(5, **{"chunk_size": 2, **bad})


def test_a_run_writes_one_file_per_chunk_with_every_question(tmp_path):
    rep = run(tmp_path / "w")
    assert rep.complete and rep.generated_chunks == 4 and rep.generated_questions == N_ITEMS
    assert rep.completions == N_ITEMS * 3 and rep.remaining == [] and rep.done_before == 0
    assert sorted(p.name for p in (tmp_path / "w").glob("chunk-*")) == [f"chunk-{k:06d}.parquet" for k in range(4)]
    assert not list((tmp_path / "w").glob(".chunk-*"))  # no temporary files left
    t = read_completions(tmp_path / "w", ids=IDS)
    assert t.schema.equals(CHUNK_SCHEMA)
    assert t.column("position").to_pylist() == list(range(N_ITEMS)) and t.column("id").to_pylist() == IDS
    seeds = t.column("seed").to_pylist()
    assert seeds == [question_seed(7, i) for i in IDS]
    assert t.column("completions").to_pylist() == [sampled(PROMPTS[i], 3, seeds[i]) for i in range(N_ITEMS)]
    assert t.column("skipped").to_pylist() == [None] * N_ITEMS


def test_finished_chunks_are_never_generated_again(tmp_path):
    b = backend()
    run(tmp_path / "w", b, chunks_per_call=1)
    assert b.calls == [3, 3, 3, 2]
    before = chunk_bytes(tmp_path / "w")
    rep = run(tmp_path / "w", b)
    assert rep.generated_chunks == 0 and rep.done_before == 4 and rep.complete
    assert b.calls == [3, 3, 3, 2]
    (tmp_path / "w" / "chunk-000002.parquet").unlink()
    rep = run(tmp_path / "w", b, chunks_per_call=1)
    assert rep.generated_chunks == 1 and b.calls[-1] == 3
    assert chunk_bytes(tmp_path / "w") == before


def test_a_finished_run_never_builds_its_backend(tmp_path):
    run(tmp_path / "w")
    built = []
    rep = run(tmp_path / "w", lambda: built.append(1) or backend())
    assert built == [] and rep.complete
    closed = []

    class Closing(ScriptedBackend):
        def close(self):
            closed.append(1)

    (tmp_path / "w" / "chunk-000000.parquet").unlink()
    run(tmp_path / "w", lambda: Closing(script=sampled))
    assert closed == [1]  # the runner closes what it built


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    run(tmp_path / "a")
    rep = run(tmp_path / "b", max_chunks=1, chunks_per_call=1)
    assert not rep.complete and rep.remaining == [1, 2, 3]
    with pytest.raises(IncompleteRunError) as e:
        read_completions(tmp_path / "b")
    assert e.value.missing == [1, 2, 3]
    run(tmp_path / "b", max_chunks=2, chunks_per_call=1)
    assert run(tmp_path / "b").complete
    assert chunk_bytes(tmp_path / "a") == chunk_bytes(tmp_path / "b")


def test_shards_split_the_chunks_and_together_equal_one_run(tmp_path):
    run(tmp_path / "one")
    reps = [run(tmp_path / "shared", num_shards=3, shard_index=i) for i in (2, 0, 1)]
    assert [r.shard_chunks for r in reps] == [1, 2, 1]
    assert [r.complete for r in reps] == [False, False, True]  # the last one to finish sees everything done
    assert chunk_bytes(tmp_path / "one") == chunk_bytes(tmp_path / "shared")
    # separate directories (one per machine) hold disjoint chunks
    run(tmp_path / "m0", num_shards=2, shard_index=0)
    run(tmp_path / "m1", num_shards=2, shard_index=1)
    assert sorted(WorkDir(tmp_path / "m0").done()) == [0, 2] and sorted(WorkDir(tmp_path / "m1").done()) == [1, 3]


def test_calls_are_fixed_per_shard_and_partial_calls_are_regenerated_whole(tmp_path):
    b = backend()
    run(tmp_path / "w", b, chunks_per_call=2)
    assert b.calls == [6, 5]
    (tmp_path / "w" / "chunk-000003.parquet").unlink()  # as if killed while writing the second call's chunks
    b2 = backend()
    run(tmp_path / "w", b2, chunks_per_call=2)
    assert b2.calls == [5]  # the whole call (chunks 2 and 3) again, so it sees the same prompts as before


def test_a_work_directory_of_another_run_is_refused_unless_overwritten(tmp_path):
    run(tmp_path / "w")
    with pytest.raises(RunMismatchError, match="model"):
        run_chunks(tmp_path / "w", ids=IDS, prompts=PROMPTS, backend=backend(), sampling=SAMPLING,
                   fingerprint={"model": "other"}, chunk_size=3)
    with pytest.raises(RunMismatchError, match="temperature"):
        run_chunks(tmp_path / "w", ids=IDS, prompts=PROMPTS, backend=backend(),
                   sampling=SamplingConfig(n=3, temperature=0.5, max_tokens=16, seed=7),
                   fingerprint={"model": "scripted"}, chunk_size=3)
    with pytest.raises(RunMismatchError, match="chunk_size"):
        run(tmp_path / "w", chunk_size=4)
    with pytest.raises(RunMismatchError, match="ids_sha256"):
        run_chunks(tmp_path / "w", ids=IDS[::-1], prompts=PROMPTS[::-1], backend=backend(), sampling=SAMPLING,
                   fingerprint={"model": "scripted"}, chunk_size=3)
    b = backend()
    rep = run_chunks(tmp_path / "w", ids=IDS, prompts=PROMPTS, backend=b, sampling=SAMPLING,
                     fingerprint={"model": "other"}, chunk_size=3, overwrite=True)
    assert rep.generated_chunks == 4 and rep.done_before == 0


def test_overwrite_in_a_shard_never_discards_the_other_shards_chunks_of_the_same_run(tmp_path):
    """Re-running one crashed shard with the command line that launched it (``--overwrite`` included) must not
    wipe the chunks other shards sharing the directory already wrote; only another run's results are discarded
    (by whichever shard opens the directory first)."""
    w = tmp_path / "w"
    run(w, num_shards=2, shard_index=0, overwrite=True)
    theirs = chunk_bytes(w)
    assert sorted(theirs) == ["chunk-000000.parquet", "chunk-000002.parquet"]
    rep = run(w, num_shards=2, shard_index=1, overwrite=True)
    assert rep.complete and rep.generated_chunks == 2
    assert {k: v for k, v in chunk_bytes(w).items() if k in theirs} == theirs
    # another run's work directory is still discarded, once, by the first shard to open it
    other = dict(num_shards=2, overwrite=True, fingerprint={"model": "other"})
    run_chunks(w, ids=IDS, prompts=PROMPTS, backend=backend(), sampling=SAMPLING, chunk_size=3, shard_index=1,
               **other)
    assert sorted(chunk_bytes(w)) == ["chunk-000001.parquet", "chunk-000003.parquet"]
    rep = run_chunks(w, ids=IDS, prompts=PROMPTS, backend=backend(), sampling=SAMPLING, chunk_size=3,
                     shard_index=0, **other)
    assert rep.complete and rep.generated_chunks == 2
    # a single-process run with overwrite still starts again
    rep = run(w, overwrite=True)
    assert rep.done_before == 0 and rep.generated_chunks == 4


def test_stale_temporary_files_of_this_shard_are_removed(tmp_path):
    w = tmp_path / "w"
    run(w, num_shards=2, shard_index=1, max_chunks=0)
    (w / ".chunk-000000.parquet.tmp-99999").write_bytes(b"partial")  # shard 0's: maybe still being written
    (w / ".chunk-000001.parquet.tmp-99999").write_bytes(b"partial")  # ours, from a killed process
    run(w, num_shards=2, shard_index=1)
    assert (w / ".chunk-000000.parquet.tmp-99999").exists()
    assert not (w / ".chunk-000001.parquet.tmp-99999").exists()

    # the work directory's JSON records half-written by a killed process: removed only by a run of one shard
    (w / ".backend.json.tmp-99999-0123abcd").write_bytes(b"{")
    run(w, num_shards=2, shard_index=1)
    assert (w / ".backend.json.tmp-99999-0123abcd").exists()
    run(w)
    assert not (w / ".backend.json.tmp-99999-0123abcd").exists()


def test_ids_must_be_unique_and_match_prompts(tmp_path):
    with pytest.raises(ValueError, match="q00"):
        run_chunks(tmp_path / "w", ids=["q00", "q01", "q00"], prompts=PROMPTS[:3], backend=backend(),
                   sampling=SAMPLING, fingerprint={})
    with pytest.raises(ValueError, match="prompts"):
        run_chunks(tmp_path / "w", ids=IDS, prompts=PROMPTS[:3], backend=backend(), sampling=SAMPLING,
                   fingerprint={})


class TooLong(ScriptedBackend):
    """Refuses prompts containing 'question 4' or 'question 9', like a model with a short context."""

    def generate(self, prompts, sampling, *, seeds=None):
        bad = [i for i, p in enumerate(prompts) if p[-1]["content"] in ("question 4", "question 9")]
        if bad:
            raise PromptTooLongError(bad, limit=8)
        return super().generate(prompts, sampling, seeds=seeds)


def test_too_long_prompts_are_skipped_and_recorded(tmp_path):
    rep = run(tmp_path / "w", TooLong(script=sampled))
    assert rep.complete and rep.skipped == 2 and rep.completions == (N_ITEMS - 2) * 3
    t = read_completions(tmp_path / "w")
    skipped = t.column("skipped").to_pylist()
    assert [i for i, s in enumerate(skipped) if s] == [4, 9] and set(skipped) == {None, "prompt_too_long"}
    comps = t.column("completions").to_pylist()
    assert comps[4] is None and comps[9] is None
    assert comps[5] == read_results_reference(tmp_path)[5]  # the other prompts are unaffected


def read_results_reference(tmp_path):
    run(tmp_path / "ref")
    return read_completions(tmp_path / "ref").column("completions").to_pylist()


class Streaming(ScriptedBackend):
    """Finishes prompts out of order, like concurrent HTTP requests."""

    def generate_iter(self, prompts, sampling, *, seeds=None):
        order = list(range(len(prompts)))
        random.Random(0).shuffle(order)
        self.calls.append(len(prompts))
        for i in order:
            if prompts[i][-1]["content"] == "question 6":
                yield i, None
            else:
                yield i, self._completions(prompts[i], sampling.n, seeds[i])


def test_streaming_backends_flush_chunks_as_they_complete(tmp_path):
    seen = []
    rep = run(tmp_path / "w", Streaming(script=sampled), on_chunk=lambda k, t: seen.append(k))
    assert rep.complete and sorted(seen) == [0, 1, 2, 3] and rep.skipped == 1
    ref = read_results_reference(tmp_path)
    got = read_completions(tmp_path / "w").column("completions").to_pylist()
    assert got[:6] == ref[:6] and got[6] is None and got[7:] == ref[7:]
    b = Streaming(script=sampled)
    run(tmp_path / "w2", b, max_chunks=2)
    assert b.calls == [6] and sorted(WorkDir(tmp_path / "w2").done()) == [0, 1]


def test_backends_without_seeds_get_one_seed_per_call(tmp_path):
    class NoSeeds:
        name = "no-seeds"

        def __init__(self):
            self.seeds = []

        def generate(self, prompts, sampling):
            self.seeds.append(sampling.seed)
            return [[f"{sampling.seed}|{j}" for j in range(sampling.n)] for _ in prompts]

        def close(self):
            pass

    b = NoSeeds()
    run(tmp_path / "w", b, chunks_per_call=1)
    assert len(set(b.seeds)) == 4  # per call, derived from its first question: stable across resumes
    t = read_completions(tmp_path / "w")
    assert t.column("seed").to_pylist() == [None] * N_ITEMS
    b2 = NoSeeds()
    (tmp_path / "w" / "chunk-000001.parquet").unlink()
    run(tmp_path / "w", b2, chunks_per_call=1)
    assert b2.seeds == [b.seeds[1]]


def test_no_question_seeds_passes_none(tmp_path):
    got = []

    class Spy(ScriptedBackend):
        def generate(self, prompts, sampling, *, seeds=None):
            got.append(seeds)
            return super().generate(prompts, sampling, seeds=seeds)

    run(tmp_path / "w", Spy(script=sampled), question_seeds=False)
    assert got and all(s is None for s in got)
    assert pq.read_table(tmp_path / "w" / "chunk-000000.parquet").column("seed").to_pylist() == [None] * 3


def test_wrong_completion_counts_are_errors(tmp_path):
    bad = ScriptedBackend(script=lambda m, n, s: ["x"] * n)
    bad._completions = lambda messages, n, seed: ["x"]  # one instead of n
    with pytest.raises(Exception, match="completions"):
        run(tmp_path / "w", bad)
    assert WorkDir(tmp_path / "w").done() == set()


# -- identical samples (a backend that ignores the sampling parameters) ---------------------------------------------
class Greedy:
    """A backend that ignores the sampling settings: every sample of a question is the same (a greedy decoder).
    ``distinct`` questions (by position in the call) sample properly; ``streaming`` adds ``generate_iter``."""

    name = "greedy"

    def __init__(self, distinct=lambda content: False):
        self.distinct = distinct
        self.calls = 0

    def _one(self, messages, n, seed):
        content = messages[-1]["content"]
        if self.distinct(content):
            return sampled(messages, n, seed)
        return [f"{content}|greedy"] * n

    def generate(self, prompts, sampling, *, seeds=None):
        self.calls += 1
        return [self._one(p, sampling.n, seeds[i] if seeds else 0) for i, p in enumerate(prompts)]

    def close(self):
        pass


class GreedyStreaming(Greedy):
    def generate_iter(self, prompts, sampling, *, seeds=None):
        self.calls += 1
        for i in reversed(range(len(prompts))):  # any order
            yield i, self._one(prompts[i], sampling.n, seeds[i] if seeds else 0)


def number(content):
    return int(content.split()[-1])


@pytest.mark.parametrize("cls", [Greedy, GreedyStreaming])
def test_identical_samples_stop_the_run_before_anything_is_written(tmp_path, cls):
    with pytest.raises(IdenticalSamplesError) as e:
        run(tmp_path / "w", cls())  # chunks of 3: the first two are held back until 8 questions can be judged
    msg = str(e.value)
    assert "identical samples at temperature 1.0" in msg and "ignores the sampling parameters" in msg
    assert "--allow-identical-samples" in msg and "greedy pass@1" in msg and re.search(r"'question \d+\|greedy'", msg)
    assert e.value.judged >= 8 and e.value.identical == e.value.judged
    assert WorkDir(tmp_path / "w").done() == set()  # nothing degenerate on disk
    rep = run(tmp_path / "w", cls(), allow_identical_samples=True)  # explicitly allowed: the same run completes
    assert rep.complete and rep.generated_chunks == 4
    assert read_completions(tmp_path / "w").column("completions").to_pylist()[0] == ["question 0|greedy"] * 3


def test_identical_samples_are_judged_only_where_they_mean_something(tmp_path):
    def go(name, sampling=SAMPLING, b=None, ids=IDS, prompts=PROMPTS):
        return run_chunks(tmp_path / name, ids=ids, prompts=prompts, backend=b or Greedy(), sampling=sampling,
                          fingerprint={"model": "greedy"}, chunk_size=3)

    greedy_t0 = SamplingConfig(n=3, temperature=0.0, max_tokens=16, seed=7)
    assert go("t0", greedy_t0).complete  # temperature 0: identical samples are what was asked for
    assert go("n1", SamplingConfig(n=1, temperature=1.0, max_tokens=16)).complete  # one sample: nothing to compare
    assert go("small", ids=IDS[:7], prompts=PROMPTS[:7]).complete  # 7 questions: too few to judge
    assert go("scripted", b=ScriptedBackend(script={}, default="same")).complete  # replays a script, no sampling
    # half the questions identical is allowed (a confident model); more than half is not
    assert go("half", b=Greedy(distinct=lambda c: number(c) % 2 == 0), ids=IDS[:10], prompts=PROMPTS[:10]).complete
    with pytest.raises(CurriculumError, match=r"6 of 9 questions got 3 identical samples"):
        go("most", b=Greedy(distinct=lambda c: number(c) in (1, 3, 5)), ids=IDS[:10], prompts=PROMPTS[:10])
    assert WorkDir(tmp_path / "most").done() == set()


def test_a_backend_that_degenerates_midway_stops_at_the_first_bad_chunk_and_resumes_rechecking(tmp_path):
    ids = [f"q{i:02d}" for i in range(40)]
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(40)]

    def go(b, **kw):
        return run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=b, sampling=SAMPLING,
                          fingerprint={"model": "greedy"}, chunk_size=10, **kw)

    breaks = Greedy(distinct=lambda c: number(c) < 20)  # chunks 0 and 1 sample, chunks 2 and 3 do not
    with pytest.raises(IdenticalSamplesError, match=r"10 of 10 questions .* Chunk\(s\) 2 were not written"):
        go(breaks)
    assert WorkDir(tmp_path / "w").done() == {0, 1}  # the good chunks stay (complete, and they passed)
    with pytest.raises(IdenticalSamplesError):  # a resumed run judges what it generates: refused again
        go(Greedy(distinct=lambda c: number(c) < 20))
    assert WorkDir(tmp_path / "w").done() == {0, 1}
    rep = go(Greedy(distinct=lambda c: number(c) < 20), allow_identical_samples=True)
    assert rep.complete and rep.generated_chunks == 2


def test_small_chunks_are_judged_together_with_the_questions_before_them(tmp_path):
    ids = [f"q{i:02d}" for i in range(30)]
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(30)]
    # questions 12..29 are greedy: chunk 4 (12, 13, 14) is judged with the 5 questions before it (7..11, sampled)
    # -> 3 of 8, fine; chunk 5 (15..17) with 10..14 -> 6 of 8: stop
    b = Greedy(distinct=lambda c: number(c) < 12)
    with pytest.raises(IdenticalSamplesError, match=r"6 of 8 questions .* Chunk\(s\) 5 were not written"):
        run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=b, sampling=SAMPLING,
                   fingerprint={"model": "greedy"}, chunk_size=3, chunks_per_call=1)
    assert WorkDir(tmp_path / "w").done() == {0, 1, 2, 3, 4}


def test_max_chunks_counts_chunks_held_back_for_the_check(tmp_path):
    b = Greedy(distinct=lambda c: True)
    rep = run(tmp_path / "w", b, max_chunks=1, chunks_per_call=1)
    assert b.calls == 1 and rep.generated_chunks == 1 and WorkDir(tmp_path / "w").done() == {0}
    rep = run(tmp_path / "w", Greedy(distinct=lambda c: True))
    assert rep.complete and rep.generated_chunks == 3
