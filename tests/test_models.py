"""Model references as users have them (:mod:`rag_curriculum.models`): a ``.gguf`` file converted once into a
cached model folder keyed by its SHA-256, and the files that cannot be converted refused in one line with nothing
left behind. Gemma 3 270M's real file is converted by the ``gemma_dir`` fixture (tests/conftest.py) and used by
the real-model tests; the bad files here are tiny GGUF files written with the gguf package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_curriculum.errors import ModelFileError
from rag_curriculum.models import SOURCE_RECORD, cache_root, convert_gguf, is_gguf, resolve_model
from rag_curriculum.shards import sha256_file

gguf = pytest.importorskip("gguf", reason="the gguf package (the dev extra) writes the test files")
np = pytest.importorskip("numpy")


def _tiny_gguf(path: Path, arch: str) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(4)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _nothing_converted(cache: Path) -> None:
    models = cache / "models"
    left = [p.name for p in models.iterdir() if not p.name.endswith(".lock")] if models.is_dir() else []
    assert left == [], f"left behind: {left}"


def test_a_folder_or_hub_id_is_used_as_given(tmp_path):
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct").path == "Qwen/Qwen2.5-0.5B-Instruct"
    r = resolve_model(str(tmp_path))
    assert (r.path, r.converted, r.record()) == (str(tmp_path), False, {"model": str(tmp_path)})
    assert is_gguf("a/B.GGUF") and not is_gguf("a/b.gguf.txt") and not is_gguf(None)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_CURRICULUM_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("RAG_CURRICULUM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "rag-curriculum"


def test_a_file_that_is_not_gguf_is_refused_before_anything_is_read(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("{\"not\": \"a model\"}")
    with pytest.raises(ModelFileError, match=r"model\.gguf: not a GGUF file \(it starts with b'\{\"no'"):
        convert_gguf(bad, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ModelFileError, match="no such file"):
        resolve_model(str(tmp_path / "missing.gguf"), cache=tmp_path / "cache")


def test_an_unsupported_architecture_is_named_with_what_transformers_reads(tmp_path):
    pytest.importorskip("transformers")
    f = _tiny_gguf(tmp_path / "foo.gguf", "foo")
    with pytest.raises(ModelFileError) as e:
        convert_gguf(f, cache=tmp_path / "cache")
    msg = str(e.value)
    assert "architecture 'foo'" in msg and "gemma3" in msg and "\n" not in msg
    _nothing_converted(tmp_path / "cache")


def test_a_truncated_file_is_refused_and_nothing_is_left_half_converted(tmp_path):
    pytest.importorskip("transformers")
    whole = _tiny_gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - 60])  # the tensor data cut short
    with pytest.raises(ModelFileError, match=r"cut\.gguf: a truncated, damaged or incomplete GGUF file"):
        convert_gguf(cut, cache=tmp_path / "cache")
    _nothing_converted(tmp_path / "cache")


def test_without_accelerate_the_conversion_says_to_install_it_not_that_the_file_is_damaged(tmp_path, monkeypatch):
    """transformers' GGUF loader refuses to run without accelerate (a ValueError, as it gives for a damaged file):
    the line names what is missing and the extra that installs it, and nothing is left half converted."""
    transformers = pytest.importorskip("transformers")
    f = _tiny_gguf(tmp_path / "fine.gguf", "llama")

    def refuse(*args, **kwargs):
        raise ValueError("accelerate is required when loading a GGUF file `pip install accelerate`.")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: object())  # (read first)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(ModelFileError) as e:
        convert_gguf(f, cache=tmp_path / "cache")
    assert "fine.gguf: reading a GGUF file needs accelerate" in str(e.value) and "damaged" not in str(e.value)
    assert "rag-curriculum[gguf]" in e.value.hint
    _nothing_converted(tmp_path / "cache")


def test_transformers_gguf_loader_parses_a_file_once_while_converting(tmp_path, monkeypatch):
    """transformers' GGUF loader parses the file for the config, the tokenizer and the weights (16 s each for Gemma
    3's vocabulary); during a conversion its calls share the first parse, and the reader is put back after."""
    pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from rag_curriculum.models import _gguf_parsed_once

    parses = []

    class Counting(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            parses.append(path)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    f = _tiny_gguf(tmp_path / "m.gguf", "llama")
    with _gguf_parsed_once():
        first = load_gguf_checkpoint(str(f), return_tensors=False)
        again = load_gguf_checkpoint(str(f), return_tensors=False)
        assert gguf.GGUFReader(str(tmp_path / "." / "m.gguf")).fields is gguf.GGUFReader(str(f)).fields
    assert len(parses) == 1 and first["config"] == again["config"]
    assert gguf.GGUFReader is Counting
    load_gguf_checkpoint(str(f), return_tensors=False)
    assert len(parses) == 2  # outside a conversion, each call parses


def test_a_conversion_reads_through_the_shared_reader_and_puts_gguf_back_when_it_fails(tmp_path, monkeypatch):
    """resolve_model converts with transformers' loader under the shared reader (a reader made there sees
    ``gguf.GGUFReader`` swapped), and a file whose settings do not fit together (32 heads over a width of 4) is one
    clear error, with ``gguf.GGUFReader`` put back."""
    pytest.importorskip("transformers")
    swapped = []

    class Counting(gguf.GGUFReader):
        def __init__(self, path, *args, **kwargs):
            swapped.append(gguf.GGUFReader is not Counting)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    f = _tiny_gguf(tmp_path / "m.gguf", "llama")
    with pytest.raises(ModelFileError, match=r"m\.gguf: its model settings do not fit together \(.*hidden size"):
        resolve_model(str(f), cache=tmp_path / "cache")
    assert swapped and all(swapped), swapped
    assert gguf.GGUFReader is Counting
    _nothing_converted(tmp_path / "cache")


@pytest.mark.slow
def test_gemma_is_converted_once_into_a_folder_keyed_by_its_digest(gemma_gguf, gemma_dir):
    from rag_curriculum.shards import sha256_file

    record = json.loads((gemma_dir / SOURCE_RECORD).read_text())
    digest = sha256_file(gemma_gguf)
    assert record["sha256"] == digest and gemma_dir.name == f"gguf-{digest[:16]}"
    assert record["architecture"] == "gemma3_text" and record["chat_template"] is False
    assert record["tokenizer_checked"] is True  # subword tokens, BOS first (tokenizer_problem found nothing)
    weights = record["files"]["model.safetensors"]  # every converted file recorded, checked before each use
    assert weights["bytes"] == (gemma_dir / "model.safetensors").stat().st_size and len(weights["sha256"]) == 64
    config = json.loads((gemma_dir / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float32 checkpoint, not a GGUF quantizer's
    again = resolve_model(str(gemma_gguf))  # found in the cache: not converted again
    assert again.path == str(gemma_dir) and again.record() == {
        "model": str(gemma_gguf), "gguf_sha256": digest, "converted_to": str(gemma_dir)}


def test_a_cached_conversion_whose_files_changed_is_not_used(tmp_path):
    """Each converted file's size and SHA-256 are in the record: a deleted, resized or same-size edited file makes
    the folder unusable (converted again), and an intact one passes."""
    from rag_curriculum.models import cached_folder_problem

    folder = tmp_path / "gguf-0123456789abcdef"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gemma3_text"}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(folder.iterdir())}
    record = {"sha256": "d" * 64, "files": files}
    (folder / SOURCE_RECORD).write_text(json.dumps(record))
    assert cached_folder_problem(folder, "d" * 64) is None
    assert "another file's" in cached_folder_problem(folder, "e" * 64)
    blob = bytearray((folder / "model.safetensors").read_bytes())
    blob[4000] ^= 0xFF  # the same size, one byte changed
    (folder / "model.safetensors").write_bytes(bytes(blob))
    assert "model.safetensors changed" in cached_folder_problem(folder, "d" * 64)
    (folder / "model.safetensors").write_bytes(bytes(blob[:-1]))
    assert "model.safetensors is 16,383 bytes" in cached_folder_problem(folder, "d" * 64)
    (folder / "model.safetensors").unlink()
    assert cached_folder_problem(folder, "d" * 64) == "model.safetensors is missing"
    (folder / SOURCE_RECORD).write_text(json.dumps({"sha256": "d" * 64}))  # an older conversion: done again
    assert "before its files were recorded" in cached_folder_problem(folder, "d" * 64)


def test_transformers_bars_are_off_while_converting_for_a_log_and_on_for_a_terminal():
    """Piped to a log, a conversion prints its two lines, not the GGUF reader's per-tensor bar redrawn hundreds of
    times; on a terminal the bars stay, and after the conversion everything is as it was."""
    import io

    pytest.importorskip("transformers")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from rag_curriculum.models import quiet_bars_off_a_terminal

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    before, enabled = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    for stream, shown in ((io.StringIO(), False), (Terminal(), True)):
        with quiet_bars_off_a_terminal(stream):
            log = io.StringIO()
            list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...", file=log))
            assert ("de-quantizing" in log.getvalue()) is shown
            assert hf_logging.is_progress_bar_enabled() is (enabled if shown else False)
        assert gguf_utils.tqdm is before and hf_logging.is_progress_bar_enabled() is enabled


def _word_tokenizer(*, chars_win: bool, bos: bool) -> object:
    """A real ``tokenizers`` Unigram model over the probe's characters and words (1,000+ pieces): with
    ``chars_win`` the characters score 0 and every word below them, the way transformers 5.17 rebuilds Gemma 3's
    GGUF vocabulary (the scores are minus the BPE rank), so each character becomes a token."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from rag_curriculum.models import _PROBE

    words = sorted({w for w in _PROBE.replace("\n", " ").split(" ") if w})
    chars = sorted(set(_PROBE.replace(" ", "\u2581")))
    filler = [f"filler{i}" for i in range(1000)]
    vocab = [("<pad>", 0.0), ("<eos>", 0.0), ("<bos>", 0.0), ("<unk>", 0.0)]
    vocab += [(c, 0.0 if chars_win else -10.0) for c in chars]
    vocab += [("\u2581" + w, -100.0 - i if chars_win else -1.0) for i, w in enumerate(words)]
    vocab += [(w, -200.0 - i if chars_win else -1.0) for i, w in enumerate(words)]
    vocab += [(f, -5000.0) for f in filler]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


def test_a_tokenizer_that_splits_text_into_characters_or_drops_bos_is_found():
    """A GGUF vocabulary rebuilt into a tokenizer that takes text one character per token (transformers 5.17 and
    Gemma 3), or that leaves out the BOS token the file asks for, is named with the token ids it gave; a subword
    tokenizer that starts with BOS passes."""
    pytest.importorskip("transformers")
    from rag_curriculum.models import tokenizer_problem

    good = _word_tokenizer(chars_win=False, bos=True)
    assert good("Final answer: the")["input_ids"][0] == 2 and len(good("Final answer: the")["input_ids"]) == 4
    assert tokenizer_problem(good, add_bos=True) is None
    chars = _word_tokenizer(chars_win=True, bos=True)
    assert len(chars("Final")["input_ids"]) == 6  # BOS and five characters
    assert "splits text into characters" in tokenizer_problem(chars, add_bos=True)
    assert "splits text into characters" in tokenizer_problem(chars, add_bos=None)
    no_bos = _word_tokenizer(chars_win=False, bos=False)
    found = tokenizer_problem(no_bos, add_bos=True)
    assert "does not start a text with the BOS token '<bos>' (id 2)" in found and "tokenizer.ggml.add_bos_token" in found
    assert tokenizer_problem(no_bos, add_bos=None) is None and tokenizer_problem(no_bos, add_bos=False) is None


def test_a_cached_conversion_with_a_character_level_tokenizer_is_converted_again(tmp_path):
    """A folder cached by a transformers that rebuilt the tokenizer wrongly (its record, from before the check,
    says nothing of the tokenizer) is found by its tokenizer, so the installed transformers converts it again; a
    recorded check is trusted."""
    pytest.importorskip("transformers")
    from rag_curriculum.models import _cached_tokenizer_problem

    source = _tiny_gguf(tmp_path / "m.gguf", "llama")
    folder = tmp_path / "gguf-0123456789abcdef"
    _word_tokenizer(chars_win=True, bos=True).save_pretrained(str(folder))
    (folder / SOURCE_RECORD).write_text(json.dumps({"sha256": "d" * 64, "transformers": "5.17.0"}))
    found = _cached_tokenizer_problem(folder, source)
    assert found.startswith("its tokenizer (rebuilt by transformers 5.17.0): it splits text into characters")
    assert "tokenizer_checked" not in json.loads((folder / SOURCE_RECORD).read_text())
    (folder / SOURCE_RECORD).write_text(json.dumps({"sha256": "d" * 64, "tokenizer_checked": True}))
    assert _cached_tokenizer_problem(folder, source) is None
    good = tmp_path / "gguf-fedcba9876543210"  # a right tokenizer cached before the check: checked once, recorded
    _word_tokenizer(chars_win=False, bos=True).save_pretrained(str(good))
    (good / SOURCE_RECORD).write_text(json.dumps({"sha256": "e" * 64, "transformers": "5.24.0"}))
    assert _cached_tokenizer_problem(good, source) is None
    assert json.loads((good / SOURCE_RECORD).read_text()) == {
        "sha256": "e" * 64, "transformers": "5.24.0", "tokenizer_checked": True}



def _fake_conversion(path, digest, out):
    """What ``_convert`` writes, without transformers: two files, then the record listing them."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text('{"model_type": "llama"}')
    (out / "model.safetensors").write_bytes(digest.encode() * 64)
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(out.iterdir())}
    (out / SOURCE_RECORD).write_text(json.dumps({"sha256": digest, "files": files, "tokenizer_checked": True}))


def test_a_conversion_is_published_through_the_commit_protocol(tmp_path, monkeypatch):
    """The cache folder is written beside, named after its writer, and moved in whole (what a dead conversion left
    is removed); converted again over a changed file, it replaces the conversion's files and keeps one a user
    added."""
    import subprocess
    import sys

    from rag_plumbing._commit import owner_tag

    from rag_curriculum import models

    monkeypatch.setattr(models, "_convert", _fake_conversion)
    source = _tiny_gguf(tmp_path / "m.gguf", "llama")
    cache = tmp_path / "cache"
    digest = sha256_file(source)
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    orphan = cache / "models" / f".gguf-{digest[:16]}.partial-{dead}-{owner_tag().split('-', 1)[1]}"
    orphan.mkdir(parents=True)
    folder, _ = convert_gguf(source, cache=cache)
    assert sorted(p.name for p in folder.iterdir()) == sorted(["config.json", "model.safetensors", SOURCE_RECORD])
    assert sorted(p.name for p in folder.parent.iterdir()) == [f".{folder.name}.lock", folder.name]  # no partial
    (folder / "NOTES.md").write_text("mine")
    (folder / "config.json").write_text('{"model_type": "changed"}')  # no longer the conversion's
    models._CHECKED.clear()
    again, _ = convert_gguf(source, cache=cache)
    assert again == folder and (folder / "NOTES.md").read_text() == "mine"
    assert json.loads((folder / "config.json").read_text()) == {"model_type": "llama"}
    assert models.cached_folder_problem(folder, digest) is None


def test_a_conversion_says_each_step_as_it_begins_and_again_while_one_runs_on(caplog):
    """A conversion is a minute on 2 idle cores and ten under load: each of its steps is said as it begins, with the
    time so far, and a step that runs on is said again every period, so a slow machine never looks hung."""
    import logging
    import time

    from rag_curriculum.models import ConversionSteps

    caplog.set_level(logging.INFO, logger="rag_curriculum.models")
    with ConversionSteps("gemma.gguf", 2, every=0.05) as step:
        step("the tokenizer")
        deadline = time.monotonic() + 10
        while not any("still the tokenizer" in m for m in caplog.messages) and time.monotonic() < deadline:
            time.sleep(0.01)
        step("the weights")
    said = caplog.messages
    assert said[0] == "converting gemma.gguf: step 1 of 2, the tokenizer; 0 s so far"
    assert any(m.startswith("converting gemma.gguf: still the tokenizer (step 1 of 2); ") for m in said), said
    assert any(m.startswith("converting gemma.gguf: step 2 of 2, the weights; ") for m in said), said
    n = len(caplog.messages)
    time.sleep(0.2)
    assert len(caplog.messages) == n  # the heartbeat stops with the conversion
