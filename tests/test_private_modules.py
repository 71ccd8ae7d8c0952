"""The generation backends live in private modules (``generation/_name.py``) and are registered under those paths,
so naming a backend never imports its heavy library and the registry never points at a module that is gone."""


def test_the_backend_registry_names_the_private_modules():
    from rag_curriculum.generation import BACKENDS

    modules = {name: BACKENDS.get(name).__module__ for name in BACKENDS.names()}
    assert modules == {"openai": "rag_curriculum.generation._openai_backend", "scripted": "rag_curriculum.generation._scripted",
                       "transformers": "rag_curriculum.generation._hf_backend", "vllm": "rag_curriculum.generation._vllm_backend"}
