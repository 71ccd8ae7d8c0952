"""What names a local model in a run's identity (:func:`rag_curriculum.generation.backend_identity`): its config,
tokenizer and template files by content, and its weights by name, size and a sampled digest, so a checkpoint trained
further and saved again into the same folder (same names, same sizes) is another model, and a copy is the same."""

from __future__ import annotations

import shutil

from rag_curriculum.generation import backend_identity


def test_weights_saved_again_at_the_same_size_are_another_model_and_a_copy_is_the_same(tmp_path):
    model = tmp_path / "checkpoint"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    weights = bytes(range(256)) * (3 << 12)  # 3 MiB: sampled, not read whole
    (model / "model.safetensors").write_bytes(weights)
    first = backend_identity("transformers", str(model), {})
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    assert backend_identity("transformers", str(copy), {})["files"] == first["files"]  # a copy: the same model
    trained = bytearray(weights)
    for i in range(0, len(trained), 4096):  # training moves every tensor: bytes all over the file
        trained[i] ^= 1
    (model / "model.safetensors").write_bytes(bytes(trained))
    again = backend_identity("transformers", str(model), {})
    assert again["model"] == first["model"] and again["files"] != first["files"]
