"""The plumbing rag-retriever and rag-curriculum share, standard library only (filelock and rich imported where
used): atomic writes, file digests, 64-bit hashes, the GC pause, forked side tasks, locks, secret masking, Ray
connection, progress bars, typed settings, a registry, portable paths. Both distributions require it and neither
requires the other, so each keeps one copy of these. Private (no stable API) outside this repository."""

from ._atomic import atomic_write_bytes, atomic_write_text, fsync_dir
from ._counts import gc_paused
from ._digest import file_sha256
from ._fork import SideTask
from ._progress import maybe_progress
from ._protocol import check_k, normalize_passage, passage_hash, split_contents
from ._ray import connect_ray, require_resources, shutdown_ray
from ._secrets import MaskingFilter, MaskingStream, mask_output, mask_secrets
from ._seeds import hash64
from ._text import normalize_answer, portable_command, portable_path

sha256_file = file_sha256

__all__ = ["MaskingFilter", "MaskingStream", "SideTask", "atomic_write_bytes", "atomic_write_text", "check_k",
           "connect_ray", "file_sha256", "fsync_dir", "gc_paused", "hash64", "mask_output", "mask_secrets",
           "maybe_progress", "normalize_answer", "normalize_passage", "passage_hash", "portable_command",
           "portable_path", "require_resources", "sha256_file", "shutdown_ray", "split_contents"]
