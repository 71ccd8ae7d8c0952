"""The retriever's own plumbing, standard library only (filelock and rich imported where used): atomic writes,
file digests, 64-bit hashes, the GC pause, forked side tasks, locks, secret masking, Ray connection, progress bars,
typed settings, a registry, portable paths: the retriever needs nothing of rag-curriculum. Private (no stable API)
outside this repository: rag-curriculum, which requires this package, takes its atomic writes, forked side tasks,
locks, secret masking, Ray connection and error machinery (``_errors``) from here rather than keeping copies."""

from ._atomic import atomic_write_bytes, atomic_write_text, fsync_dir
from ._counts import gc_paused
from ._digest import file_sha256
from ._fork import SideTask
from ._progress import maybe_progress
from ._ray import connect_ray, require_resources, shutdown_ray
from ._secrets import MaskingFilter, mask_secrets
from ._seeds import hash64
from ._text import normalize_answer, portable_command, portable_path

sha256_file = file_sha256

__all__ = ["MaskingFilter", "SideTask", "atomic_write_bytes", "atomic_write_text", "connect_ray", "file_sha256",
           "fsync_dir", "gc_paused", "hash64", "mask_secrets", "maybe_progress", "normalize_answer",
           "portable_command", "portable_path", "require_resources", "sha256_file", "shutdown_ray"]
