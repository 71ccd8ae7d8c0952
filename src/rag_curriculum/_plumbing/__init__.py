"""Plumbing written once: atomic writes, shard-directory digests, derived seeds and ids, secret masking, the
command line a run records, the trainer tail, distributions, the JSONL log reader, the GC pause, forked side tasks,
locks between processes (filelock), and the files that mark a partition's outputs as a set. Private to the toolkit
(no stable API), and the one door to it: the other packages import these names from here, not from its modules.
Light to import (standard library only).

Atomic writes, forked side tasks, locks, progress bars, secret masking and the Ray connection are written once, in
``rag_plumbing`` (./plumbing, which rag-curriculum and rag-retriever both require): the toolkit's names for them are
the plumbing's, so a fix lands in both distributions at once."""

from rag_plumbing._atomic import (
    atomic_write_bytes,
    atomic_write_text,
    atomic_write_with,
    fsync_dir,
    tmp_name,
)
from rag_plumbing._fork import SideTask, die_with_parent
from rag_plumbing._lock import held_or_refused, waited
from rag_plumbing._ports import LISTEN_HINT, claim_port, listen_problem
from rag_plumbing._progress import (
    NARROW_COLUMNS,
    duration_text,
    make_progress,
    maybe_progress,
    rate_text,
    track,
)
from rag_plumbing._ray import (
    AUTH_HINT,
    UNREACHABLE_HINT,
    auth_cause,
    connect_ray,
    drop_options,
    is_auth_error,
    require_resources,
    shutdown_ray,
    unreachable,
)
from rag_plumbing._secrets import (
    MASK,
    MaskingFilter,
    MaskingStream,
    is_secret,
    mask_output,
    mask_secrets,
    redact_command,
    redact_overrides,
)

from ._command import current_command
from ._counts import distribution, gc_paused, trainer_tail
from ._digest import file_sha256, shards_digest
from ._jsonl import jsonl_records, read_jsonl_latest, read_state, write_state
from ._lazy import lazy_exports, moved_names, moved_to, renamed_keywords
from ._output_sets import MANIFEST, RECORD_FILE, SUMMARY_FILE, WORK, output_set_problem, stats_set_problem
from ._seeds import derive_seed, hash64, stable_id
from ._types import AsDict, expected_type, init_hints

__all__ = [
    "LISTEN_HINT",
    "claim_port",
    "listen_problem",
    "AsDict",
    "AUTH_HINT",
    "MANIFEST",
    "MASK",
    "MaskingFilter",
    "MaskingStream",
    "NARROW_COLUMNS",
    "RECORD_FILE",
    "SUMMARY_FILE",
    "SideTask",
    "UNREACHABLE_HINT",
    "WORK",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_with",
    "auth_cause",
    "connect_ray",
    "current_command",
    "derive_seed",
    "die_with_parent",
    "distribution",
    "drop_options",
    "duration_text",
    "expected_type",
    "file_sha256",
    "fsync_dir",
    "gc_paused",
    "hash64",
    "held_or_refused",
    "init_hints",
    "is_auth_error",
    "is_secret",
    "jsonl_records",
    "lazy_exports",
    "make_progress",
    "mask_output",
    "mask_secrets",
    "maybe_progress",
    "moved_names",
    "moved_to",
    "output_set_problem",
    "rate_text",
    "read_jsonl_latest",
    "read_state",
    "redact_command",
    "redact_overrides",
    "renamed_keywords",
    "require_resources",
    "shards_digest",
    "shutdown_ray",
    "stable_id",
    "stats_set_problem",
    "tmp_name",
    "track",
    "trainer_tail",
    "unreachable",
    "waited",
    "write_state",
]
