"""Run a generation backend over many questions in resumable, deterministic, shardable chunks.

This is the machinery behind ``curriculum partition`` (and what ``curriculum eval`` can reuse). The contract:

**Chunks.** The questions are given in a fixed order (``ids`` and ``prompts``). Chunk ``k`` holds positions
``[k * chunk_size, (k + 1) * chunk_size)``; it is the unit of work, of resumption and of sharding. Chunk ``k``
belongs to shard ``k % num_shards``, so ``N`` processes given ``--num-shards N --shard-index i`` split the work
without talking to each other, and any of them may share one work directory.

**Seeds.** Question ``id`` is sampled with seed :func:`question_seed` ``(sampling.seed, id)``; it never depends on
the chunk, the shard or what ran before. Backends that cannot take per-prompt seeds are given one seed per call,
derived from the call's first question.

**Calls.** A backend call gets ``chunks_per_call`` consecutive chunks of the shard (default: enough for the
backend's preferred ``call_size``, one chunk for backends whose samples depend on their batch-mates, such as
transformers). Call boundaries are fixed by the shard's chunk list, and a call whose chunks are partly done is
generated whole again, so a resumed run makes every call with exactly the prompts an uninterrupted run did.
Backends with ``generate_iter`` (the OpenAI-compatible one) are streamed instead: requests flow continuously and
each chunk is written as soon as its last question finishes.

**Files.** ``work/run.json`` records what the results depend on (the caller's ``fingerprint``, the chunk size,
the question ids); a work directory made with other settings is refused (``overwrite=True`` starts again). Each
finished chunk is written to ``work/chunk-000123.parquet`` through a temporary name, fsync and rename, so a
chunk file exists only when it is complete, and a process killed at any moment (SIGKILL included) loses at most
the calls in flight. A chunk file holds one row per question: ``position``, ``id``, ``seed``, ``skipped`` (None,
or ``"prompt_too_long"``) and ``completions`` (``n`` strings, or None when skipped).

**Identical samples.** With ``temperature > 0`` and ``n > 1`` a sampling backend gives a question ``n`` different
samples (nearly always); a server that ignores the sampling parameters (``transformers serve`` decodes greedily
unless the request turns sampling on) gives ``n`` identical ones, and pass@n silently becomes a greedy pass@1.
So, before a chunk is written, the runner judges the questions of the chunk (topped up with the questions
generated just before it to at least :data:`IDENTICAL_MIN_QUESTIONS` = 8; chunks of fewer questions at the start
of a run are held back, unwritten, until 8 questions can be judged): when more than half of them
(:data:`IDENTICAL_MAX_SHARE`) have ``n`` identical samples it raises :class:`IdenticalSamplesError`, naming the
likely cause and the fix, and the chunk is not written (nothing degenerate lands on disk; the chunks written
before it passed the check). A run of fewer than 8 questions in all is too small to judge and is not checked,
nor are backends that replay fixed completions (scripted). ``allow_identical_samples=True``
(``--allow-identical-samples``) turns the check off, for a temperature near 0 or a model that always answers the
same.

API::

    report = run_chunks("out/work", ids=ids, prompts=prompts, backend=backend, sampling=sampling,
                        fingerprint={"model": ..., "data": ...}, chunk_size=256,
                        num_shards=1, shard_index=0, progress=True)
    if report.complete:                       # every chunk of every shard is on disk
        table = read_completions("out/work")      # one row per question, in position order
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._plumbing import (
    NARROW_COLUMNS,
    atomic_write_with,
    derive_seed,
    duration_text,
    mask_secrets,
    rate_text,
    waited,
)
from ..errors import (  # noqa: F401  (the run's errors, in this public module's __all__)
    ConfigError,
    CurriculumError,
    IdenticalSamplesError,
    IncompleteRunError,
    PromptTooLongError,
    RunMismatchError,
)
from ..shards import write_json
from ._base import (
    GenerationBackend,
    Messages,
    SamplingConfig,
    listening,
    replays,
    seeded_call_supported,
)

log = logging.getLogger(__name__)

__all__ = [
    "CHUNK_SCHEMA", "ChunkPlan", "IdenticalSamplesError", "IncompleteRunError", "RunMismatchError", "RunReport",
    "WorkDir", "question_seed", "read_completions", "run_chunks",
]

RUN_FILE = "run.json"
#: ``backend.describe()`` of the backend that began the run: its settings as the engine resolved them (platform,
#: engine options chosen per platform, chat template digest, library version), recorded in the outputs.
BACKEND_FILE = "backend.json"
RUNNER_VERSION = 1
SKIPPED_TOO_LONG = "prompt_too_long"
_CHUNK_RE = re.compile(r"^chunk-(\d{6})\.parquet$")
_TMP_RE = re.compile(r"^\.chunk-(\d{6})\.parquet\.tmp-\d+(?:-[0-9a-f]{8})?$")  # _plumbing.tmp_name's (and older)
#: The work directory's JSON records (run.json, backend.json) half-written by a killed process.
_JSON_TMP_RE = re.compile(r"^\.(?:run|backend)\.json\.tmp-\d+(?:-[0-9a-f]{8})?$")
#: The identical-samples check judges at least this many questions at once ...
IDENTICAL_MIN_QUESTIONS = 8
#: ... and stops the run when more than this share of them have n identical samples.
IDENTICAL_MAX_SHARE = 0.5

#: The columns of a chunk file (one row per question).
CHUNK_SCHEMA = pa.schema([
    pa.field("position", pa.int64(), nullable=False),
    pa.field("id", pa.string(), nullable=False),
    pa.field("seed", pa.int64()),
    pa.field("skipped", pa.string()),
    pa.field("completions", pa.list_(pa.string())),
])


def question_seed(seed: int, item_id: str) -> int:
    """The sampling seed of one question: a 63-bit hash of the run's seed and the question's id.

    >>> question_seed(0, "musique-2hop__1") == question_seed(0, "musique-2hop__1") != question_seed(1, "musique-2hop__1")
    True
    """
    return derive_seed(seed, "question", item_id, bits=63)  # a non-negative int64, as vLLM and torch take


def _normalise(obj: Any) -> Any:
    """As recorded in the work directory: plain JSON, secrets masked (the toolkit's one rule)."""
    return json.loads(json.dumps(mask_secrets(obj), sort_keys=True, default=str))


def ids_digest(ids: Sequence[str]) -> str:
    h = hashlib.sha256()
    for i in ids:
        h.update(str(i).encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


@dataclass(frozen=True)
class ChunkPlan:
    """How ``num_items`` questions are cut into chunks and dealt to shards.

    >>> p = ChunkPlan(10, 3, num_shards=2, shard_index=1)
    >>> p.num_chunks, p.shard_chunks(), list(p.positions(3))
    (4, [1, 3], [9])
    """

    num_items: int
    chunk_size: int
    num_shards: int = 1
    shard_index: int = 0

    def __post_init__(self) -> None:
        if self.num_items < 0:
            raise ConfigError("num_items must be >= 0")
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.num_shards < 1:
            raise ConfigError(f"num_shards must be >= 1, got {self.num_shards}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ConfigError(f"shard_index must be in 0..{self.num_shards - 1}, got {self.shard_index}")

    @property
    def num_chunks(self) -> int:
        return math.ceil(self.num_items / self.chunk_size)

    def positions(self, k: int) -> range:
        return range(k * self.chunk_size, min((k + 1) * self.chunk_size, self.num_items))

    def owner(self, k: int) -> int:
        return k % self.num_shards

    def shard_chunks(self) -> list[int]:
        return list(range(self.shard_index, self.num_chunks, self.num_shards))


class WorkDir:
    """The directory of one run's finished chunks and its ``run.json``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"WorkDir({str(self.path)!r})"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive lock between processes sharing this directory, waited for (released if the holder dies;
        ``filelock``: a lock file of its own where the file system has no ``flock``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with waited(self.path / ".lock"):
            yield

    def read_run(self) -> dict[str, Any] | None:
        p = self.path / RUN_FILE
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise RunMismatchError(f"{p}: unreadable ({e}); remove the work directory to start again") from None

    def open(self, run: Mapping[str, Any], *, overwrite: bool = False, keep_same_run: bool = False) -> None:
        """Record ``run`` in a new work directory, or check that an existing one was made by the same run.

        ``overwrite`` discards a directory made by another run; it also discards the same run's results (start
        again) unless ``keep_same_run`` (shards sharing the directory: the others' chunks must survive)."""
        run = _normalise(run)
        with self.lock():
            old = self.read_run()
            if old is not None and old != run and not keep_same_run and not self.done():
                # a run that stopped before its first chunk (a mistyped model, a server that did not answer):
                # nothing generated, nothing to protect, so the corrected command starts (not with shards: another
                # shard of that run may be starting here)
                log.info("%s: replacing the record of a run that generated nothing (%s)", self.path, _diff(old, run))
                self.clear()
                old = None
            if old is not None and old != run:
                if not overwrite:
                    diff = _diff(old, run)
                    raise RunMismatchError(
                        f"{self.path} holds results of a run with other settings (differs in: {diff}); pass "
                        "--overwrite (overwrite=True) to discard them, or choose another --out")
                log.warning("%s: discarding the results of a run with other settings (overwrite)", self.path)
                self.clear()
                old = None
            elif old is not None and overwrite and not keep_same_run:
                self.clear()
                old = None
            if old is None:
                self.path.mkdir(parents=True, exist_ok=True)
                write_json(self.path / RUN_FILE, run)

    def clear(self) -> None:
        for p in self.path.iterdir():
            if p.name.endswith(".lock"):  # locks (filelock) stay: a held lock unlinked would lock nothing
                continue
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()

    def chunk_path(self, k: int) -> Path:
        return self.path / f"chunk-{k:06d}.parquet"

    def done(self) -> set[int]:
        if not self.path.is_dir():
            return set()
        return {int(m.group(1)) for p in self.path.iterdir() if (m := _CHUNK_RE.match(p.name))}

    def remove_stale_temp(self, chunks: set[int], *, sole_writer: bool = False) -> int:
        """Delete temporary files a killed process left for ``chunks`` (only this shard's, never another's); with
        ``sole_writer`` (a run of one shard: no other process writes here) also its half-written JSON records."""
        n = 0
        for p in list(self.path.iterdir()) if self.path.is_dir() else []:
            m = _TMP_RE.match(p.name)
            if (m and int(m.group(1)) in chunks) or (sole_writer and _JSON_TMP_RE.match(p.name)):
                p.unlink(missing_ok=True)
                n += 1
        return n

    def write_chunk(self, k: int, table: pa.Table) -> None:
        """Write chunk ``k`` atomically: temporary name, fsync, rename."""
        atomic_write_with(self.chunk_path(k), lambda tmp: pq.write_table(
            table, tmp, compression="zstd", compression_level=3, row_group_size=1 << 16))

    def read_chunk(self, k: int) -> pa.Table:
        p = self.chunk_path(k)
        try:
            return pq.read_table(p)
        except Exception as e:
            raise CurriculumError(f"{p}: unreadable chunk ({e}); delete it and run again to regenerate it") from e


def _diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> str:
    keys = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            keys.append(_diff(a, b, f"{prefix}{k}."))
        else:
            keys.append(f"{prefix}{k}: {a!r} -> {b!r}" if len(repr(a)) + len(repr(b)) < 120 else f"{prefix}{k}")
    return ", ".join(keys) or "?"


@dataclass
class RunReport:
    """What one :func:`run_chunks` call did."""

    work: Path
    num_items: int
    num_chunks: int
    shard_chunks: int  # chunks this shard owns
    done_before: int  # of those, already on disk when the call began
    generated_chunks: int = 0
    generated_questions: int = 0
    completions: int = 0
    skipped: int = 0  # questions skipped in this call (prompt too long)
    seconds: float = 0.0  # wall time spent generating and writing
    backend_seconds: float = 0.0  # of which inside the backend
    remaining: list[int] = field(default_factory=list)  # this shard's chunks still missing (max_chunks stop)
    complete: bool = False  # every chunk of every shard is on disk

    @property
    def completions_per_second(self) -> float:
        return self.completions / self.seconds if self.seconds > 0 else 0.0


#: Seconds between two heartbeat lines when no bar is shown and stderr is not a terminal (a log file, a pipe).
HEARTBEAT_SECONDS = 30.0


class _Bar:
    """A rich progress bar on stderr: questions done, completions per second, time left. The completions the
    backend reports as they finish (:func:`~rag_curriculum.generation._base.report_progress`) move the bar, its rate
    and its time left at once, not only when a call returns; so does how far its unfinished sequences are
    (:func:`~rag_curriculum.generation._base.report_working`: the transformers backend's tokens so far), so the rate
    and the time left show from the first tokens, though the count moves only as completions finish. Without a bar
    (``enabled`` false) and with ``heartbeat``, a line is logged every :data:`HEARTBEAT_SECONDS` with the same
    counts, so a log shows a run that is alive."""

    def __init__(self, enabled: bool, description: str, *, total_questions: int, done_questions: int,
                 todo_completions: int, heartbeat: bool = False) -> None:
        self.enabled = enabled
        self.description = description
        self.total_q = total_questions
        self.done_q = done_questions
        self.todo = todo_completions
        self.completed = 0  # completions of the calls that returned
        self.inflight = 0  # completions of the call in flight, as the backend reports them
        self.working = 0.0  # how far the call's unfinished sequences are, in completions' worth
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if heartbeat and not enabled:
            self._beat = threading.Thread(target=self._heartbeat, name="generation-heartbeat", daemon=True)
            self._beat.start()
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column
        from rich.text import Text

        console = Console(stderr=True)
        narrow = console.width < NARROW_COLUMNS  # 80 columns: the words go, the numbers stay whole

        class Questions(ProgressColumn):
            def render(self, task: Any) -> Text:
                if "p" in task.fields:  # the call in flight: its prompts done
                    done, total, what = task.fields["p"], task.fields["pt"], "prompts"
                else:
                    done, total, what = task.fields["q"], task.fields["qt"], "questions"
                return Text(f"{done:,}/{total:,}" + ("" if narrow else f" {what}"), style="green", no_wrap=True)

        class Rate(ProgressColumn):
            def render(self, task: Any) -> Text:
                text = rate_text(task.finished_speed or task.speed, "completions")
                return Text(text.replace(" completions/s", "/s") if narrow else text, style="cyan", no_wrap=True)

        self.progress = Progress(TextColumn("[bold]{task.description}", table_column=Column(
                                     no_wrap=True, overflow="ellipsis", max_width=24 if narrow else None)),
                                 BarColumn(bar_width=10 if narrow else 20),
                                 Questions(table_column=Column(no_wrap=True)),
                                 Rate(table_column=Column(no_wrap=True, min_width=8 if narrow else 20)),
                                 TimeElapsedColumn(table_column=Column(no_wrap=True)), TextColumn("eta"),
                                 TimeRemainingColumn(table_column=Column(no_wrap=True)), console=console,
                                 speed_estimate_period=600)
        self.progress.start()
        self.task = self.progress.add_task(description, total=max(todo_completions, 1), q=done_questions,
                                           qt=total_questions)

    @property
    def done(self) -> int:
        """Completions made so far in this run (those of the call in flight included)."""
        return self.completed + self.inflight

    @property
    def worked(self) -> float:
        """The run's work so far in completions' worth: those done, and how far the unfinished ones are."""
        return min(self.done + self.working, max(self.todo, self.done))

    def advance(self, questions: int, completions: int) -> None:
        self.done_q += questions
        self.completed += completions
        if self.enabled:
            self.progress.update(self.task, completed=self.worked, q=self.done_q)

    def _moved(self) -> None:
        if self.enabled:
            self.progress.update(self.task, completed=self.worked)

    def status(self) -> str:
        """``3/30 questions, 14/120 completions (0.0314 completions/s), 7 min 26 s elapsed, eta 56 min``: the
        heartbeat's line (the rate and the time left from the work so far: completions done, and the tokens of
        those in flight where the backend says them)."""
        elapsed = time.monotonic() - self.t0
        done, worked = self.done, self.worked
        rate = worked / elapsed if elapsed > 0 and worked else None
        eta = (self.todo - worked) / rate if rate else None
        return (f"{self.done_q:,}/{self.total_q:,} questions, {done:,}/{self.todo:,} completions "
                f"({rate_text(rate, 'completions')}), {duration_text(elapsed)} elapsed, eta {duration_text(eta)}")

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            log.info("%s: %s", self.description, self.status())

    @contextlib.contextmanager
    def call(self, backend: Any, call: Any, n: int) -> Iterator[None]:
        """While ``backend`` generates ``call``: the completions it reports as they finish count at once (the bar,
        its rate and time left; the heartbeat), and a line under the bar shows the call's prompts done (removed
        when the call returns; nothing at all when neither a bar nor a heartbeat is on)."""
        if not self.enabled and self._beat is None:
            yield
            return
        total = len(call.prompts)
        task = (self.progress.add_task(f"  └ {call.describe()}", total=max(total * n, 1), p=0, pt=total)
                if self.enabled else None)
        done = [0, 0]

        def step(prompts: int, completions: int) -> None:
            done[0] = min(total, done[0] + prompts)  # a retry without the too-long prompts counts them again
            done[1] = min(total * n, done[1] + completions)
            self.inflight = done[1]
            if task is not None:
                self.progress.update(task, completed=min(total * n, done[1] + self.working), p=done[0])
            self._moved()

        def working(completions: float) -> None:
            self.working = max(0.0, float(completions))
            if task is not None:
                self.progress.update(task, completed=min(total * n, done[1] + self.working))
            self._moved()

        try:
            with listening(backend, step, working):
                yield
        finally:
            self.inflight = 0
            self.working = 0.0
            if task is not None:
                self.progress.remove_task(task)

    def close(self) -> None:
        self._stop.set()
        if self.enabled:
            self.progress.stop()


class _IdenticalCheck:
    """The identical-samples check (see the module docstring): chunks go in as they finish, come out when they
    may be written; raises :class:`IdenticalSamplesError` instead when most judged questions have ``n`` identical
    samples."""

    def __init__(self, backend: Any, sampling: SamplingConfig, *, allow: bool, total_questions: int) -> None:
        self.backend = backend
        self.sampling = sampling
        self.allow = allow
        self.applies = sampling.temperature > 0 and sampling.n > 1 and not replays(backend)
        self.active = self.applies and not allow and total_questions >= IDENTICAL_MIN_QUESTIONS
        self.recent: deque[bool] = deque(maxlen=IDENTICAL_MIN_QUESTIONS)  # judged questions, newest last
        self.held: list[tuple[int, pa.Table, list[bool], str | None]] = []
        self.warned = False

    @staticmethod
    def flags(completions: Sequence[Sequence[str] | None]) -> tuple[list[bool], str | None]:
        """For each question that was generated (not skipped): are its samples all the same? And an example."""
        out, example = [], None
        for c in completions:
            if c is None or len(c) < 2:
                continue
            same = all(x == c[0] for x in c)
            out.append(same)
            if same and example is None:
                example = c[0]
        return out, example

    def offer(self, k: int, table: pa.Table) -> list[tuple[int, pa.Table]]:
        """Chunk ``k`` is generated: the chunks that may be written now, in order (none while held back)."""
        if not self.applies:
            return [(k, table)]
        flags, example = self.flags(table.column("completions").to_pylist())
        if not self.active:  # allowed, or too few questions to judge: only say so
            if not self.warned and len(flags) >= 2 and sum(flags) * 2 > len(flags):
                log.warning("%d of %d questions of chunk %d have %d identical samples at temperature %s "
                            "(allowed: %s)", sum(flags), len(flags), k, self.sampling.n, self.sampling.temperature,
                            "--allow-identical-samples" if self.allow else "too few questions to judge")
                self.warned = True
            return [(k, table)]
        self.held.append((k, table, flags, example))
        return self._release(final=False)

    def finish(self) -> list[tuple[int, pa.Table]]:
        """The run's generation is over: what is still held back (judged if there is enough to judge)."""
        return self._release(final=True) if self.held else []

    def _release(self, *, final: bool) -> list[tuple[int, pa.Table]]:
        new = [f for h in self.held for f in h[2]]
        if len(new) + len(self.recent) < IDENTICAL_MIN_QUESTIONS and not final:
            return []  # the start of a run, in chunks smaller than the window: wait for more questions
        need = max(0, IDENTICAL_MIN_QUESTIONS - len(new))
        window = (list(self.recent)[len(self.recent) - need:] if need else []) + new
        if len(window) >= IDENTICAL_MIN_QUESTIONS and sum(window) > IDENTICAL_MAX_SHARE * len(window):
            chunks = [h[0] for h in self.held]
            example = next((h[3] for h in self.held if h[3] is not None), None)
            self.held = []
            raise IdenticalSamplesError(self._message(sum(window), len(window), chunks, example),
                                        identical=sum(window), judged=len(window))
        self.recent.extend(new)
        out = [(h[0], h[1]) for h in self.held]
        self.held = []
        return out

    def _message(self, identical: int, judged: int, chunks: list[int], example: str | None) -> str:
        s = self.sampling
        name = getattr(self.backend, "name", type(self.backend).__name__)
        shown = (example if len(example) <= 80 else example[:80] + "...") if example is not None else ""
        hint = getattr(self.backend, "sampling_hint", None) or (
            "check that the backend samples (temperature, top_p and a seed reach the engine)")
        return (f"{identical} of {judged} questions got {s.n} identical samples at temperature {s.temperature} "
                f"(e.g. {shown!r}): the {name} backend most likely ignores the sampling parameters and decodes "
                f"greedily, so pass@{s.n} would really be a greedy pass@1. Chunk(s) {', '.join(map(str, chunks))} "
                f"were not written. Fix: {hint}; then run again with --overwrite (the fix changes the run's "
                "settings) or another --out. If identical samples are expected (a temperature near 0, a model that "
                "always answers the same), pass --allow-identical-samples.")


def run_chunks(
    work: str | Path | WorkDir,
    *,
    ids: Sequence[str],
    prompts: Sequence[Messages],
    backend: GenerationBackend | Callable[[], GenerationBackend],
    sampling: SamplingConfig,
    fingerprint: Mapping[str, Any],
    chunk_size: int = 256,
    num_shards: int = 1,
    shard_index: int = 0,
    chunks_per_call: int | None = None,
    question_seeds: bool = True,
    overwrite: bool = False,
    max_chunks: int | None = None,
    progress: bool = False,
    description: str = "generating",
    on_chunk: Callable[[int, pa.Table], None] | None = None,
    allow_identical_samples: bool = False,
    on_open: Callable[[], None] | None = None,
) -> RunReport:
    """Generate ``sampling.n`` completions for every question of this shard that is not done yet.

    ``ids`` (unique) and ``prompts`` are the questions in their fixed order; ``prompts`` may be a lazy sequence
    (only the prompts of chunks still to do are read). ``backend`` is a backend, or a zero-argument factory
    called only when something is left to generate (so a finished run never loads a model; the runner then
    closes it). ``fingerprint`` is everything else the completions depend on (model, backend settings, input
    data): a work directory made with another is refused unless ``overwrite`` (which, with ``num_shards`` > 1,
    never discards the same run's chunks: they may be other shards' work). ``question_seeds=False`` gives
    backends no per-question seeds (faster on vLLM, not reproducible). ``max_chunks`` stops after that many
    chunks were generated (a budget; run again to continue). ``on_chunk(k, table)`` is called after chunk ``k``
    is written; ``on_open()`` once the work directory has taken this run (a caller's records of the run written only
    then, so a run refused for other settings changes nothing). With ``temperature > 0`` and ``n > 1``, a run whose
    questions mostly get ``n`` identical samples stops with :class:`IdenticalSamplesError` before writing them,
    unless ``allow_identical_samples`` (see the module docstring).
    """
    wd = work if isinstance(work, WorkDir) else WorkDir(work)
    n_items = len(ids)
    if len(prompts) != n_items:
        raise ConfigError(f"{len(prompts)} prompts for {n_items} ids")
    if len(set(ids)) != n_items:
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        raise ConfigError(f"question ids must be unique (for seeds and resumption); {dup!r} repeats")
    plan = ChunkPlan(n_items, chunk_size, num_shards, shard_index)
    if chunks_per_call is not None and chunks_per_call < 1:
        raise ConfigError(f"chunks_per_call must be >= 1, got {chunks_per_call}")
    run = {
        "runner_version": RUNNER_VERSION,
        "fingerprint": dict(fingerprint),
        "sampling": sampling.to_dict(),
        "num_items": n_items,
        "chunk_size": chunk_size,
        "question_seeds": question_seeds,
        "ids_sha256": ids_digest(ids),
    }
    # a shard never discards what other shards of the same run wrote (the run's other processes may be running,
    # or done, in this directory): with several shards `overwrite` only replaces another run's results
    wd.open(run, overwrite=overwrite, keep_same_run=num_shards > 1)
    if on_open is not None:
        on_open()
    mine = plan.shard_chunks()
    wd.remove_stale_temp(set(mine), sole_writer=num_shards == 1)
    done = wd.done()
    todo = [k for k in mine if k not in done]
    report = RunReport(wd.path, n_items, plan.num_chunks, len(mine), len(mine) - len(todo))
    owned = False
    if todo and not hasattr(backend, "generate"):
        backend = backend()  # type: ignore[operator]
        owned = True
    try:
        if todo:
            _run_todo(wd, plan, mine, todo, done, report, ids=ids, prompts=prompts, backend=backend,  # type: ignore[arg-type]
                      sampling=sampling, chunks_per_call=chunks_per_call, question_seeds=question_seeds,
                      max_chunks=max_chunks, progress=progress, description=description, on_chunk=on_chunk,
                      allow_identical_samples=allow_identical_samples)
    finally:
        if owned and hasattr(backend, "close"):
            backend.close()  # type: ignore[union-attr]
    now_done = wd.done()
    report.remaining = [k for k in mine if k not in now_done]
    report.complete = len(now_done & set(range(plan.num_chunks))) == plan.num_chunks
    return report


def _run_todo(wd: WorkDir, plan: ChunkPlan, mine: list[int], todo: list[int], done: set[int], report: RunReport,
              *, ids: Sequence[str], prompts: Sequence[Messages], backend: GenerationBackend,
              sampling: SamplingConfig, chunks_per_call: int | None, question_seeds: bool,
              max_chunks: int | None, progress: bool, description: str,
              on_chunk: Callable[[int, pa.Table], None] | None, allow_identical_samples: bool = False) -> None:
    if chunks_per_call is None:
        call_size = getattr(backend, "call_size", None)
        chunks_per_call = max(1, math.ceil(call_size / plan.chunk_size)) if call_size else 1
    use_seeds = question_seeds and seeded_call_supported(backend)
    parallel = hasattr(backend, "generate_calls")  # the Ray engine: the same calls, many at once
    streaming = not parallel and hasattr(backend, "generate_iter")
    log.info("%s: %d of %d chunks of shard %d/%d to generate (%d questions, n=%d)", wd.path, len(todo), len(mine),
             plan.shard_index, plan.num_shards, sum(len(plan.positions(k)) for k in todo), sampling.n)
    label = getattr(backend, "progress_label", None)
    bar = _Bar(progress, f"{description} · {label}" if label else description, total_questions=sum(len(plan.positions(k)) for k in mine),
               done_questions=sum(len(plan.positions(k)) for k in mine if k in done),
               todo_completions=sum(len(plan.positions(k)) for k in todo) * sampling.n,
               heartbeat=not progress and not _is_terminal(sys.stderr))

    check = _IdenticalCheck(backend, sampling, allow=allow_identical_samples,
                            total_questions=sum(len(plan.positions(k)) for k in todo))

    def seeds_of(positions: Sequence[int]) -> list[int]:
        return [question_seed(sampling.seed, ids[p]) for p in positions]

    def flush(k: int, results: Mapping[int, list[str] | None]) -> None:
        pos = list(plan.positions(k))
        rows = {
            "position": pos,
            "id": [ids[p] for p in pos],
            "seed": seeds_of(pos) if use_seeds else [None] * len(pos),
            "skipped": [None if results[p] is not None else SKIPPED_TOO_LONG for p in pos],
            "completions": [results[p] for p in pos],
        }
        table = pa.table(rows, schema=CHUNK_SCHEMA)
        for kk, t in check.offer(k, table):  # none while held back; raises on identical samples
            write(kk, t)

    recorded = [False]

    def write(k: int, table: pa.Table) -> None:
        wd.write_chunk(k, table)
        if not recorded[0]:  # once a chunk of this process has landed: the backend that made it is recorded
            record_backend(wd, backend)
            recorded[0] = True
        n = table.num_rows
        n_skip = n - table.column("skipped").null_count
        report.generated_chunks += 1
        report.generated_questions += n
        report.skipped += n_skip
        report.completions += (n - n_skip) * sampling.n
        if on_chunk is not None:
            on_chunk(k, table)

    t0 = time.perf_counter()
    try:
        calls = _calls(plan, mine, set(todo), prompts, sampling, seeds_of if use_seeds else None, question_seeds,
                       ids, chunks_per_call, max_chunks)
        if parallel:
            index = {k: i for i, k in enumerate(mine)}
            total = len({index[k] // chunks_per_call for k in todo})
            _run_parallel(backend, plan, calls, total, flush, report, sampling, bar)
        elif streaming:
            _run_streaming(backend, plan, todo, prompts, sampling, seeds_of if use_seeds else None, flush, report,
                           max_chunks, bar)
        else:
            _run_calls(backend, plan, calls, flush, report, bar)
        for kk, t in check.finish():
            write(kk, t)
    finally:
        bar.close()
        report.seconds = time.perf_counter() - t0
    if report.generated_chunks:
        log.info("%s: generated %d chunk(s), %d questions, %d completions in %s (%s)%s",
                 wd.path, report.generated_chunks, report.generated_questions, report.completions,
                 duration_text(report.seconds), rate_text(report.completions_per_second, "completions"),
                 f"; {report.skipped} question(s) skipped as too long" if report.skipped else "")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _generate(backend: GenerationBackend, prompts: list[Messages], sampling: SamplingConfig,
              seeds: list[int] | None, report: RunReport) -> list[list[str] | None]:
    """One backend call; prompts the backend refuses as too long come back as None (the rest are generated)."""
    t = time.perf_counter()
    try:
        out: list[list[str] | None] = list(
            backend.generate(prompts, sampling, seeds=seeds) if seeds is not None
            else backend.generate(prompts, sampling))
    except PromptTooLongError as e:
        bad = set(e.indices)
        log.warning("%d prompt(s) longer than the model's context are skipped", len(bad))
        if e.results is not None:
            out = [None if i in bad else e.results[i] for i in range(len(prompts))]
        else:
            keep = [i for i in range(len(prompts)) if i not in bad]
            report.backend_seconds += time.perf_counter() - t
            sub = _generate(backend, [prompts[i] for i in keep], sampling,
                            None if seeds is None else [seeds[i] for i in keep], report)
            out = [None] * len(prompts)
            for i, r in zip(keep, sub, strict=True):
                out[i] = r
            return out
    report.backend_seconds += time.perf_counter() - t
    if len(out) != len(prompts):
        raise CurriculumError(f"backend {getattr(backend, 'name', backend)!r} returned {len(out)} results for "
                              f"{len(prompts)} prompts")
    for r in out:
        if r is not None and len(r) != sampling.n:
            raise CurriculumError(f"backend {getattr(backend, 'name', backend)!r} returned {len(r)} completions "
                                  f"where n={sampling.n} were asked")
    return out


@dataclass
class Call:
    """One backend call: the chunks to do that it completes, its questions' positions (the whole call, done chunks
    included), prompts, sampling and seeds (None: the backend takes no per-prompt seeds)."""

    index: int
    chunks: list[int]
    positions: list[int]
    prompts: list[Messages]
    sampling: SamplingConfig
    seeds: list[int] | None

    def describe(self) -> str:
        """``chunks 4, 5 (questions 1024..1535)``: how errors name the call."""
        chunks = ", ".join(map(str, self.chunks))
        what = f"chunk{'s' if len(self.chunks) > 1 else ''} {chunks}"
        return f"{what} (questions {self.positions[0]}..{self.positions[-1]})" if self.positions else what


def _calls(plan: ChunkPlan, mine: list[int], todo: set[int], prompts: Sequence[Messages], sampling: SamplingConfig,
           seeds_of: Callable[[Sequence[int]], list[int]] | None, question_seeds: bool, ids: Sequence[str],
           chunks_per_call: int, max_chunks: int | None) -> Iterator[Any]:
    """The backend calls still to make, in order, each as a :class:`Call`:
    ``chunks_per_call`` consecutive chunks of the shard whose prompts are made whole even when some of its chunks
    are done (a resumed run makes exactly the calls an uninterrupted one did); stops once the calls cover
    ``max_chunks`` chunks to do. Prompts are read only when a call is taken."""
    made = 0
    for start in range(0, len(mine), chunks_per_call):
        call = mine[start:start + chunks_per_call]
        missing = [k for k in call if k in todo]
        if not missing:
            continue
        if max_chunks is not None and made >= max_chunks:
            break
        positions = [p for k in call for p in plan.positions(k)]  # the whole call, as an uninterrupted run made it
        call_prompts = [list(prompts[p]) for p in positions]
        if seeds_of is not None:
            seeds = seeds_of(positions)
            call_sampling = sampling
        else:
            seeds = None
            call_sampling = sampling if not question_seeds else SamplingConfig(
                n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                max_tokens=sampling.max_tokens, seed=derive_seed(sampling.seed, "call", ids[positions[0]], bits=63))
        made += len(missing)
        yield Call(start // chunks_per_call, missing, positions, call_prompts, call_sampling, seeds)


def _deliver(plan: ChunkPlan, call: Any, out: list[list[str] | None],
             flush: Callable[[int, Mapping[int, list[str] | None]], None], bar: _Bar | None) -> None:
    """A call's results: the progress bar advances by its chunks still to do, which are flushed."""
    results = dict(zip(call.positions, out, strict=True))
    if bar is not None:  # the call's questions of chunks still to do, as soon as the call returns
        new = [results[p] for k in call.chunks for p in plan.positions(k)]
        bar.advance(len(new), sum(len(r) for r in new if r is not None))
    for k in call.chunks:
        flush(k, results)


def _run_calls(backend: GenerationBackend, plan: ChunkPlan, calls: Iterator[Any],
               flush: Callable[[int, Mapping[int, list[str] | None]], None], report: RunReport,
               bar: _Bar | None = None) -> None:
    for call in calls:
        with bar.call(backend, call, call.sampling.n) if bar is not None else contextlib.nullcontext():
            out = _generate(backend, call.prompts, call.sampling, call.seeds, report)
        _deliver(plan, call, out, flush, bar)


def _run_parallel(backend: Any, plan: ChunkPlan, calls: Iterator[Any], total: int,
                  flush: Callable[[int, Mapping[int, list[str] | None]], None], report: RunReport,
                  sampling: SamplingConfig, bar: _Bar | None = None) -> None:
    """The same calls, made by a backend that runs many at once (``generate_calls``: the Ray engine's pool);
    results come back in the order calls finish and are checked as a local call's are."""
    name = getattr(backend, "name", backend)
    for call, out, seconds in backend.generate_calls(calls, total=total):
        report.backend_seconds += seconds
        if len(out) != len(call.prompts):
            raise CurriculumError(f"backend {name!r} returned {len(out)} results for {len(call.prompts)} prompts")
        _deliver(plan, call, out, flush, bar)


def _run_streaming(backend: Any, plan: ChunkPlan, todo: list[int], prompts: Sequence[Messages],
                   sampling: SamplingConfig, seeds_of: Callable[[Sequence[int]], list[int]] | None,
                   flush: Callable[[int, Mapping[int, list[str] | None]], None], report: RunReport,
                   max_chunks: int | None, bar: _Bar | None = None) -> None:
    chunks = todo if max_chunks is None else todo[:max_chunks]
    positions = [p for k in chunks for p in plan.positions(k)]
    left = {k: len(plan.positions(k)) for k in chunks}
    results: dict[int, list[str] | None] = {}

    class _Lazy(Sequence):
        def __len__(self) -> int:
            return len(positions)

        def __getitem__(self, i: Any) -> Any:
            return list(prompts[positions[i]])

    seeds = seeds_of(positions) if seeds_of is not None else None
    t = time.perf_counter()
    for i, comps in backend.generate_iter(_Lazy(), sampling, seeds=seeds):
        if comps is not None and len(comps) != sampling.n:
            raise CurriculumError(f"backend {backend.name!r} returned {len(comps)} completions where n={sampling.n} "
                                  "were asked")
        p = positions[i]
        results[p] = comps
        if bar is not None:  # every question as it finishes
            bar.advance(1, len(comps) if comps is not None else 0)
        k = p // plan.chunk_size
        left[k] -= 1
        if left[k] == 0:
            report.backend_seconds += time.perf_counter() - t
            flush(k, results)
            for q in plan.positions(k):
                results.pop(q, None)
            t = time.perf_counter()
    report.backend_seconds += time.perf_counter() - t


def record_backend(wd: WorkDir, backend: Any) -> None:
    """Write ``backend.describe()`` to the work directory (once: the run's first generating process), so the outputs
    can say how the engine resolved its settings; a process that resumes with a backend resolved differently is
    warned (its completions may differ numerically from the first process's)."""
    describe = getattr(backend, "describe", None)
    if not callable(describe):
        return
    desc = _normalise(describe())  # secrets masked
    path = wd.path / BACKEND_FILE
    with wd.lock():
        old = read_backend(wd)
        if old is None:
            write_json(path, desc)
        elif old != desc:
            log.warning("%s: this process resolved the backend differently from the one that began the run (%s); "
                        "the outputs record the first", wd.path, _diff(old, desc))


def read_backend(work: str | Path | WorkDir) -> dict[str, Any] | None:
    """The ``backend.describe()`` recorded by :func:`record_backend`, or None."""
    wd = work if isinstance(work, WorkDir) else WorkDir(work)
    p = wd.path / BACKEND_FILE
    try:
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
    except json.JSONDecodeError:
        return None


def read_completions(work: str | Path | WorkDir, *, ids: Sequence[str] | None = None) -> pa.Table:
    """Every question's chunk row, in position order (raises :class:`IncompleteRunError` naming missing chunks).

    With ``ids``, also checks that position ``p`` holds question ``ids[p]``."""
    wd = work if isinstance(work, WorkDir) else WorkDir(work)
    run = wd.read_run()
    if run is None:
        raise IncompleteRunError(f"{wd.path}: no {RUN_FILE}; nothing was generated here", [])
    plan = ChunkPlan(run["num_items"], run["chunk_size"])
    done = wd.done()
    missing = [k for k in range(plan.num_chunks) if k not in done]
    if missing:
        raise IncompleteRunError(f"{wd.path}: {len(missing)} of {plan.num_chunks} chunks are not done yet "
                                 f"(e.g. {missing[:5]})", missing)
    tables = [wd.read_chunk(k) for k in range(plan.num_chunks)]
    table = pa.concat_tables(tables) if tables else CHUNK_SCHEMA.empty_table()
    pos = table.column("position").to_pylist()
    if pos != list(range(plan.num_items)):
        raise CurriculumError(f"{wd.path}: chunk files do not cover positions 0..{plan.num_items - 1} exactly once")
    if ids is not None and table.column("id").to_pylist() != list(ids):
        raise CurriculumError(f"{wd.path}: the chunks hold other questions than the input (was the input changed?)")
    return table
