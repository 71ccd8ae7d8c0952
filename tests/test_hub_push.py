"""Sharing a curriculum on the Hugging Face Hub, tested up to the network call on real builds of
the shared samples: ``curriculum push DIR REPO`` checks the folder and its data card offline (the card parsed by
``huggingface_hub.DatasetCard``, its ``configs`` resolved by ``datasets`` to the shards in order, its
``dataset_info`` against the manifest), then makes a dataset repository and sends the listed files in one commit.
``HfApi`` is replaced by a recorder here (there is no network); what it was asked to send is laid out as the
repository would hold it (huggingface_hub's own pattern filter) and read with ``datasets.load_dataset``: the rows in
curriculum order, the card the data card."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum import hub
from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.errors import HubError, ShardError, UsageError
from rag_curriculum.shards import read_rows

datasets = pytest.importorskip("datasets")
huggingface_hub = pytest.importorskip("huggingface_hub")
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


class Recorder:
    """An ``HfApi`` that records what it is asked and sends nothing."""

    def __init__(self, fail: BaseException | None = None):
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kw}))
        if self.fail:
            raise self.fail
        return huggingface_hub.RepoUrl(f"https://huggingface.co/datasets/{repo_id}")

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw))
        # the folder it was given, as it was then (a push stages the files it sends and removes them after)
        self.sent = Path(tempfile.mkdtemp()) / "sent"
        shutil.copytree(kw["folder_path"], self.sent)
        return "commit"


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_data) -> Path:
    """A HotpotQA linear curriculum in three shards (12 rows, 5 a shard)."""
    out = tmp_path_factory.mktemp("push") / "hotpotqa-linear"
    build_curriculum(BuildConfig(sources=[SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 12)], schedule="linear",
                                 out=str(out), seed=0, rows_per_shard=5), command="curriculum build (test)")
    return out


def _as_the_hub_holds_it(upload: dict, repo: Path, folder: Path) -> Path:
    """The files ``upload_folder`` would send from ``folder`` (what it was given), selected by huggingface_hub's own
    filter, laid out in ``repo``."""
    from huggingface_hub.utils import filter_repo_objects

    every = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for rel in filter_repo_objects(every, allow_patterns=upload["allow_patterns"],
                                   ignore_patterns=upload.get("ignore_patterns")):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / rel, repo / rel)
    return repo


def test_a_push_sends_the_card_manifest_plot_and_shards_and_loads_in_curriculum_order(built, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    api = Recorder()
    (built / "notes.txt").write_text("mine, not the curriculum's")  # a file of the user's is not sent
    try:
        sent = hub.push(built, "me/hotpotqa-linear", private=True, api=api)
    finally:
        (built / "notes.txt").unlink()
    (_, create), (_, upload) = api.calls
    assert create == {"repo_id": "me/hotpotqa-linear", "repo_type": "dataset", "private": True, "exist_ok": True}
    assert upload["repo_id"] == "me/hotpotqa-linear" and upload["repo_type"] == "dataset"
    assert not Path(upload["folder_path"]).exists()  # the staged copy it sent from, removed after
    shards = ["data/part-00000.parquet", "data/part-00001.parquet", "data/part-00002.parquet"]
    assert upload["allow_patterns"] == ["README.md", "manifest.json", "level_by_index.png", *shards]
    assert upload["delete_patterns"] == ["data/*", "*.png"]  # an earlier push's other shards go in the same commit
    assert "12 rows in 3 shard(s)" in upload["commit_message"]
    assert sent.url == "https://huggingface.co/datasets/me/hotpotqa-linear" and sent.num_rows == 12

    repo = _as_the_hub_holds_it(upload, tmp_path / "repo", api.sent)
    held = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    assert held == sorted(["README.md", "manifest.json", "level_by_index.png", *shards])
    ds = datasets.load_dataset(str(repo), split="train", cache_dir=str(tmp_path / "cache"))  # the card's configs
    assert list(ds["id"]) == [r["id"] for r in read_rows(built)]  # every row, in curriculum order
    assert list(ds["curriculum_index"]) == list(range(12))
    card = huggingface_hub.DatasetCard.load(repo / "README.md")  # the dataset's card is the data card
    local = huggingface_hub.DatasetCard.load(built / "README.md")
    assert card.data == local.data and card.text.split("## Loading")[0] == local.text.split("## Loading")[0]
    assert card.data.configs == [{"config_name": "default",
                                  "data_files": [{"split": "train", "path": "data/*.parquet"}]}]
    assert card.data.license == "cc-by-sa-4.0" and card.data.dataset_info["splits"][0]["num_examples"] == 12


def test_the_command_checks_offline_then_pushes(built, monkeypatch):
    dry = run("push", built, "me/hotpotqa-linear", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "ready" in dry.output and "Nothing sent (--dry-run)" in dry.output
    assert "data/part-00002.parquet" in dry.output and "level_by_index.png" in dry.output
    api = Recorder()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: api)
    offline = run("push", built, "me/hotpotqa-linear")  # the suite runs with HF_HUB_OFFLINE=1
    assert offline.exit_code == 1 and "HF_HUB_OFFLINE is set" in offline.output and "--dry-run" in offline.output
    assert api.calls == []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    r = run("push", built, "me/hotpotqa-linear", "--private", "-m", "first curriculum")
    assert r.exit_code == 0, r.output
    assert "pushed" in r.output and 'datasets.load_dataset("me/hotpotqa-linear", split="train")' in r.output
    assert [c for c, _ in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][1]["private"] is True and api.calls[1][1]["commit_message"] == "first curriculum"


def test_a_refused_push_is_one_line(built, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    no_network = ConnectionError("[Errno -2] Name or service not known")
    with pytest.raises(HubError, match="pushing .* to me/x failed: .*Name or service not known") as e:
        hub.push(built, "me/x", api=Recorder(fail=no_network))
    assert "network" in e.value.hint
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: Recorder(fail=no_network))
    r = run("push", built, "me/x")
    assert r.exit_code == 1 and "error: pushing" in r.output and "Traceback" not in r.output


def test_a_push_without_the_network_says_the_network_is_needed_not_to_log_in(built, monkeypatch, tmp_path):
    """No network: what huggingface_hub's own client raises when the Hub cannot be reached (a name that does not
    resolve, a refused connection: a real HfApi pointed at an address nothing listens on) is said as such; only a
    refusal of the credentials (HTTP 401/403) says to log in."""
    import socket

    from huggingface_hub.errors import HfHubHTTPError

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    real = huggingface_hub.HfApi(endpoint=f"http://127.0.0.1:{port}", token="hf_" + "x" * 34)
    with pytest.raises(HubError) as e:
        hub.push(built, "me/x", api=real)
    assert "the Hub could not be reached" in str(e.value) and "a push needs the network" in str(e.value)
    assert "connect this machine to the network" in e.value.hint and "--dry-run" in e.value.hint
    assert "log in" not in e.value.hint and "auth" not in e.value.hint
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: real)
    r = run("push", built, "me/x")
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "a push needs the network" in said and "hf auth login" not in said
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".push-")]  # nothing staged is left

    import httpx2  # huggingface_hub's HTTP client

    request = httpx2.Request("POST", "https://huggingface.co/api/repos/create")
    refused = HfHubHTTPError("401 Unauthorized", response=httpx2.Response(401, request=request))
    with pytest.raises(HubError, match="the Hub refused the credentials \\(HTTP 401") as e:
        hub.push(built, "me/x", api=Recorder(fail=refused))
    assert "hf auth login" in e.value.hint and "network" not in e.value.hint


def test_the_pushed_card_loads_the_repository_it_was_pushed_to(built, monkeypatch):
    """The card sent names the repository in its loading example (load_dataset("OWNER/NAME")), not the folder it
    was built in; its front matter (what the Hub and load_dataset read) is the folder card's, checked the same, and
    the folder's own card is untouched."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    before = (built / "README.md").read_bytes()
    api = Recorder()
    hub.push(built, "someone/curriculum-v2", api=api)
    sent = (api.sent / "README.md").read_text()
    loading = sent.split("## Loading", 1)[1].split("\n## ", 1)[0]
    assert 'datasets.load_dataset("someone/curriculum-v2", split="train")' in loading
    assert 'snapshot_download("someone/curriculum-v2", repo_type="dataset")' in loading
    assert built.name not in loading and "outputs/" not in loading  # the folder name is gone
    assert 'load_hf_dataset("' + built.name + '")' in before.decode()  # ... it was there in the folder's card
    assert (built / "README.md").read_bytes() == before
    assert hub.check_card(api.sent).data.pretty_name == hub.check_card(built).data.pretty_name


def test_the_card_is_checked_offline(built, tmp_path):
    assert hub.check_card(built).data.pretty_name == "RAG-RL linear curriculum (hotpotqa)"

    def broken(name, edit):
        d = tmp_path / name
        shutil.copytree(built, d)
        card = d / "README.md"
        card.write_text(edit(card.read_text()))
        return d

    cases = {
        "no-front-matter": (lambda t: t.split("---\n", 2)[2], "no YAML front matter"),
        "bad-yaml": (lambda t: t.replace("license: cc-by-sa-4.0", "license: CC BY-SA: 4.0"), "does not parse"),
        "other-files": (lambda t: t.replace("path: data/*.parquet", "path: data/part-0000[01].parquet"),
                        r"not the manifest's 3 shard\(s\) in order"),
        "rows": (lambda t: t.replace("num_examples: 12", "num_examples: 11"), "disagrees with the manifest"),
        "no-license": (lambda t: t.replace("license: cc-by-sa-4.0\n", ""), "names no license"),
    }
    for name, (edit, says) in cases.items():
        with pytest.raises(ShardError, match=says):
            hub.check_card(broken(name, edit))
        r = run("push", tmp_path / name, "me/x", "--dry-run")
        assert r.exit_code == 1 and "error:" in r.output, (name, r.output)


@pytest.mark.parametrize("what", ["missing", "file", "index", "partition", "changed-shard"])
def test_what_is_not_a_curriculum_is_refused_before_anything_is_sent(what, built, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    api = Recorder()
    target = tmp_path / what
    says = {"missing": "not found", "file": "not a directory", "index": "is an index",
            "partition": "not a shard directory", "changed-shard": "content hash differs"}[what]
    if what == "file":
        target.write_text("x")
    elif what == "index":
        target.mkdir()
        (target / "manifest.json").write_text(json.dumps({"kind": "index"}))
    elif what == "partition":
        target.mkdir()
        (target / "partition.json").write_text("{}")
    elif what == "changed-shard":
        shutil.copytree(built, target)
        with open(target / "data" / "part-00001.parquet", "ab") as f:
            f.write(b"x")
    with pytest.raises(ShardError, match=says) as e:
        hub.push(target, "me/x", api=api)
    assert api.calls == []
    if what == "partition":  # its buckets are what pushes
        assert f"push {target}/answerable" in e.value.hint


def test_a_bad_repository_id_is_a_usage_error(built):
    with pytest.raises(UsageError, match="not a Hub repository id"):
        hub.plan_upload(built, "me/bad name")
    r = run("push", built, "me/bad name", "--dry-run")
    assert r.exit_code == 2 and "OWNER/NAME" in r.output


@pytest.mark.slow
def test_a_search_r1_build_and_a_partition_bucket_have_cards_the_hub_reads(tmp_path, shared_data):
    """A Search-R1 file's licence is free text ("NQ: CC BY-SA 3.0; ..."): written as the card's `license` it made
    front matter no YAML parser reads; it is `other` now, and the bucket of a partition pushes as a build does."""
    from support.search_r1_files import write_search_r1_parquet

    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import PartitionConfig, partition

    src = write_search_r1_parquet(tmp_path / "train.parquet", [("hotpotqa", 4), ("musique", 4)])
    out = tmp_path / "search-r1"
    build_curriculum(BuildConfig(sources=[SourceSpec("search-r1", str(src), None)], out=str(out), seed=0),
                     command="curriculum build (test)")
    card = hub.check_card(out)
    assert card.data.license == "other" and card.data.source_datasets
    assert hub.plan_upload(out, "me/sr1").num_rows == 8

    mq = tmp_path / "musique"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=2)], schedule="max",
                                 out=str(mq), seed=0), command="curriculum build (test)")
    part = tmp_path / "part"
    partition(PartitionConfig(shards=str(mq), backend="scripted", model="inline", samples=2, out=str(part)),
              backend=ScriptedBackend(script=lambda messages, n, seed: ["nothing"] * n))
    plan = hub.plan_upload(part / "unanswerable", "me/musique-unanswerable")
    assert plan.num_rows == 6 and "pass_rate.png" in plan.files
    with pytest.raises(ShardError, match="not a shard directory") as e:
        hub.plan_upload(part, "me/x")
    assert f"push {part}/answerable" in e.value.hint
