"""A shard directory shared on the Hugging Face Hub: ``curriculum push DIR REPO`` uploads a build (or a partition
bucket) as a dataset repository whose card is the data card, so ``datasets.load_dataset(REPO, split="train")``
reads the shards in curriculum order (the card's YAML ``configs``: ``data/*.parquet``, which ``datasets`` sorts by
name).

Everything short of the network is checked here, offline, before anything is sent (:func:`plan_upload`): the
folder against its manifest (:func:`~rag_curriculum.shards.validate_shards`: every shard's hash, the order), the
card parsed as the Hub parses it (``huggingface_hub.DatasetCard``), its ``configs`` resolved by ``datasets``' own
reader of card metadata to exactly the manifest's shards in order, and its ``dataset_info`` against the manifest.
:func:`push` then makes the repository (``HfApi.create_repo``, ``exist_ok``) and sends the listed files in one
commit (``HfApi.upload_folder``), deleting the repository's other shards (a curriculum pushed again with fewer
shards would otherwise load the old ones too). The card it sends is the folder's with its loading example naming
the repository (``load_dataset("OWNER/NAME")``, not the local folder: :func:`card_for_repository`); the folder's
own card is left as it is. A push that cannot reach the Hub says the network is needed; one whose credentials the
Hub refuses says to log in. ``huggingface_hub`` reads the token as it always does (``HF_TOKEN``
or ``hf auth login``); the toolkit never takes one on its command line.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, CurriculumError, HubError, ShardError, UsageError
from .shards import MANIFEST, read_manifest, validate_shards

__all__ = ["HubUpload", "card_for_repository", "check_card", "plan_upload", "push"]

CARD = "README.md"
#: Remote files a push replaces: a shard or plot the new upload does not have is deleted in the same commit.
REPLACED = ["data/*", "*.png"]
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@dataclass
class HubUpload:
    """What a push sends: the ``files`` of ``directory`` (paths relative to it: the card, the manifest, the plots
    the card shows, then the shards in curriculum order) to the dataset repository ``repo_id``, in one commit."""

    directory: Path
    repo_id: str
    files: list[str]
    num_rows: int
    bytes: int
    data_files: list[str]
    commit_message: str
    private: bool | None = None
    url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def card_for_repository(text: str, repo_id: str) -> str:
    """A build's card as pushed to the Hub dataset repository ``repo_id``: its loading example (the first Python
    block under ``## Loading``, which names the local folder) made to name the repository; the rest, the front
    matter included, unchanged. A card without that block (a partition bucket's) is returned as it is.

    >>> card = "# T\\n\\n## Loading\\n\\n```python\\nds = load_hf_dataset(\\"outputs/x\\")\\n```\\n\\n## Next\\n"
    >>> 'load_dataset("me/x", split="train")' in card_for_repository(card, "me/x")
    True
    >>> "outputs/x" in card_for_repository(card, "me/x"), card_for_repository(card, "me/x").endswith("## Next\\n")
    (False, True)
    """
    m = re.search(r"^## Loading\n.*?^```python\n.*?^```\n", text, flags=re.M | re.S)
    if m is None:
        return text
    head = text[m.start():m.end()].split("```python\n", 1)[0]
    block = (f"```python\nimport datasets\nds = datasets.load_dataset(\"{repo_id}\", split=\"train\")   # the "
             "`configs` above: data/*.parquet, in curriculum order\n\n"
             "from huggingface_hub import snapshot_download\nfrom rag_curriculum.shards import load_hf_dataset\n"
             f"local = snapshot_download(\"{repo_id}\", repo_type=\"dataset\")   # the card, manifest.json, data/\n"
             "ds = load_hf_dataset(local)   # verifies manifest.json, keeps curriculum order\n```\n")
    return text[:m.start()] + head + block + text[m.end():]


def check_card(directory: str | Path, manifest: dict[str, Any] | None = None) -> Any:
    """The data card of ``directory`` parsed as the Hub parses it (a ``huggingface_hub.DatasetCard``), checked
    offline against the manifest: front matter present and valid YAML, a license, ``configs`` that ``datasets``
    resolves to exactly the manifest's shards in curriculum order, and ``dataset_info`` with the manifest's rows
    and bytes. Raises :class:`~rag_curriculum.errors.ShardError` naming what is wrong."""
    from datasets.data_files import DataFilesDict, sanitize_patterns
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard

    d = Path(directory)
    manifest = manifest if manifest is not None else read_manifest(d)
    path = d / CARD
    again = "build it again (the build writes the card)"
    if not path.is_file():
        raise ShardError(f"{path}: no data card", hint=again)
    try:
        card = DatasetCard.load(path)
    except Exception as e:  # the YAML the Hub would refuse
        raise ShardError(f"{path}: the card's front matter does not parse: {e}", hint=again) from e
    data = card.data
    if not data.to_dict():
        raise ShardError(f"{path}: the card has no YAML front matter (license, configs, ...)", hint=again)
    if not data.get("license"):
        raise ShardError(f"{path}: the card names no license", hint=again)
    configs = MetadataConfigs.from_dataset_card_data(data)  # what load_dataset(REPO) reads of the card
    if "default" not in configs or "data_files" not in configs["default"]:
        raise ShardError(f"{path}: the card's configs have no default config with data_files, so "
                         "load_dataset(REPO) would guess the files", hint=again)
    patterns = sanitize_patterns(configs["default"]["data_files"])
    if list(patterns) != ["train"]:
        raise ShardError(f"{path}: the card's default config has splits {sorted(patterns)}, not one train split",
                         hint=again)
    resolved = DataFilesDict.from_patterns(patterns, base_path=str(d))["train"]
    got = [Path(f).resolve().relative_to(d.resolve()).as_posix() for f in resolved]
    want = [s["file"] for s in manifest.get("shards") or []]
    if got != want:
        raise ShardError(f"{path}: the card's configs ({patterns['train']}) resolve to {got[:4]}"
                         f"{' ...' if len(got) > 4 else ''}, not the manifest's {len(want)} shard(s) in order "
                         f"({want[:4]}{' ...' if len(want) > 4 else ''})", hint=again)
    info = data.get("dataset_info") or {}
    splits = info.get("splits") or [{}]
    size = sum(int(s["bytes"]) for s in manifest.get("shards") or [])
    if splits[0].get("num_examples") != manifest["num_rows"] or info.get("download_size") != size:
        raise ShardError(f"{path}: the card's dataset_info ({splits[0].get('num_examples')} rows, "
                         f"{info.get('download_size')} bytes) disagrees with the manifest ({manifest['num_rows']} "
                         f"rows, {size} bytes)", hint=again)
    return card


def plan_upload(directory: str | Path, repo_id: str, *, private: bool | None = None,
                commit_message: str | None = None) -> HubUpload:
    """Everything a push checks and decides before the network: ``repo_id`` well formed, ``directory`` a valid
    shard directory (hashes, order) with a card that passes :func:`check_card`, and the files to send."""
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError as e:
        raise UsageError(f"{repo_id!r} is not a Hub repository id: {e}",
                         hint="give it as NAME or OWNER/NAME (letters, digits, '-', '_', '.'), e.g. "
                              "me/hotpotqa-linear") from e
    d = Path(directory)
    what = "push a folder made by `curriculum build` (or a bucket of `curriculum partition`)"
    if not d.exists():
        raise ShardError(f"{d}: not found", hint=what)
    if not d.is_dir():
        raise ShardError(f"{d}: not a directory", hint=what)
    if not (d / MANIFEST).is_file():
        raise ShardError(f"{d}: not a shard directory (no {MANIFEST})",
                         hint=what + ("; a partition's --out holds one per bucket: push "
                                      f"{d}/answerable, ..." if (d / "partition.json").is_file() else ""))
    manifest = read_manifest(d)
    if manifest.get("kind") in ("index", "bm25-index"):
        raise ShardError(f"{d} is an index (made by `curriculum index`), not a shard directory", hint=what)
    manifest = validate_shards(d)  # every shard there, its hash, curriculum_index increasing across them
    card = check_card(d, manifest)
    images = sorted({m for m in _IMAGE.findall(card.text) if "://" not in m and (d / m).is_file()})
    shards = [s["file"] for s in manifest["shards"]]
    files = [CARD, MANIFEST, *images, *shards]
    size = sum((d / f).stat().st_size for f in files)
    kind = manifest.get("kind", "curriculum")
    message = commit_message or (f"{kind}: {manifest['num_rows']:,} rows in {len(shards)} shard(s) "
                                 f"(rag-curriculum {manifest.get('toolkit', {}).get('version', '?')})")
    return HubUpload(directory=d, repo_id=repo_id, files=files, num_rows=manifest["num_rows"], bytes=size,
                     data_files=list(shards), commit_message=message, private=private,
                     extra={"pretty_name": card.data.get("pretty_name")})


def push(directory: str | Path, repo_id: str, *, private: bool | None = None, commit_message: str | None = None,
         dry_run: bool = False, api: Any = None) -> HubUpload:
    """Upload ``directory`` to the dataset repository ``repo_id`` (made if missing; ``private`` for a new one), in
    one commit, after :func:`plan_upload`'s checks; with ``dry_run`` only the checks (nothing sent). ``api``: an
    ``huggingface_hub.HfApi`` (default: a new one, which reads ``HF_TOKEN`` or the saved login). Returns what was
    sent, with the repository's ``url``.

    ``curriculum push`` calls this.

    Args:
        directory: a shard directory (a build, or one bucket of a partition) with its data card.
        repo_id: ``NAME`` or ``OWNER/NAME``.
        private: make a new repository private (None: the Hub's default).
        commit_message: the commit's message (None: one naming the folder).
        dry_run: check, send nothing.
        api: see above.

    Returns:
        What was (or, with ``dry_run``, would be) sent: the files, the repository and its ``url``.

    Raises:
        UsageError: a ``repo_id`` that is not a Hub repository id.
        ShardError: a folder that is not a valid shard directory, or whose card does not match its manifest.
        ConfigError: ``HF_HUB_OFFLINE`` set (without ``dry_run``).
        HubError: the Hub refused or could not take the push: no network (said as such), no login or no write
            access (said as such), or another refusal.

    Examples:
        ```python
        from rag_curriculum.hub import push

        push("outputs/musique-min-max", "me/musique-min-max", dry_run=True)   # the checks only
        push("outputs/musique-min-max", "me/musique-min-max", private=True).url
        ```
    """
    plan = plan_upload(directory, repo_id, private=private, commit_message=commit_message)
    if dry_run:
        return plan
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        raise ConfigError("HF_HUB_OFFLINE is set: pushing to the Hub needs the network",
                          hint=f"unset HF_HUB_OFFLINE to push; `curriculum push {plan.directory} {repo_id} "
                               "--dry-run` checks the folder and its card offline")
    api = api or HfApi()
    try:
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        with _staged(plan) as folder:  # the files as sent: the card's loading example names repo_id
            api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=str(folder),
                              allow_patterns=plan.files, delete_patterns=REPLACED,
                              commit_message=plan.commit_message)
    except CurriculumError:
        raise
    except Exception as e:
        raise _push_error(plan, repo_id, e) from e
    plan.url = str(url)
    return plan


@contextlib.contextmanager
def _staged(plan: HubUpload) -> Iterator[Path]:
    """A temporary folder holding what a push sends: the folder's files (hard links where the file system allows,
    else copies) and its card as the repository will hold it (:func:`card_for_repository`); removed after."""
    with tempfile.TemporaryDirectory(prefix=".push-", dir=plan.directory.parent) as tmp:
        folder = Path(tmp)
        for rel in plan.files:
            src, dst = plan.directory / rel, folder / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if rel == CARD:
                dst.write_text(card_for_repository(src.read_text(encoding="utf-8"), plan.repo_id), encoding="utf-8")
                continue
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        yield folder


#: Exception classes (by name, anywhere in the class's MRO or the chain of causes) that mean the Hub was not
#: reached: the network is down, the name does not resolve, the connection was refused or timed out.
_UNREACHABLE = frozenset({"ConnectionError", "ConnectError", "NetworkError", "TransportError", "ConnectTimeout",
                          "TimeoutException", "Timeout", "TimeoutError", "gaierror", "OfflineModeIsEnabled"})


def _push_error(plan: HubUpload, repo_id: str, error: BaseException) -> HubError:
    """The one-line error of a push the Hub did not take, with what to do: the network when the Hub could not be
    reached, a login when it refused the credentials (401, 403), both otherwise."""
    chain, e = [], error
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    unreachable = any(k.__name__ in _UNREACHABLE for e in chain for k in type(e).__mro__)
    status = next((getattr(getattr(e, "response", None), "status_code", None) for e in chain
                   if getattr(getattr(e, "response", None), "status_code", None)), None)
    again = "run the same command again: the push is one commit, so nothing half-sent stays"
    dry = f"`curriculum push {plan.directory} {repo_id} --dry-run` checks the folder and its card offline"
    if unreachable:
        return HubError(f"pushing {plan.directory} to {repo_id} failed: the Hub could not be reached ({error}); "
                        "a push needs the network",
                        hint=f"connect this machine to the network (or set HF_ENDPOINT to a Hub it can reach) and "
                             f"{again}; {dry}")
    if status in (401, 403):
        return HubError(f"pushing {plan.directory} to {repo_id} failed: the Hub refused the credentials "
                        f"(HTTP {status}: {error})",
                        hint=f"log in (`hf auth login`, or set HF_TOKEN) with write access to the repository, and "
                             f"{again}")
    return HubError(f"pushing {plan.directory} to {repo_id} failed: {error}",
                    hint=f"check the network and the login (`hf auth login`, or HF_TOKEN, with write access to the "
                         f"repository), and {again}")
