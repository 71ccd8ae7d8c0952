"""The training rollout's generation backend (``PolicyBackend``) on the real tiny model: every token the model
sampled is kept. The model is made to sample its pad token (``<|endoftext|>``, not an
end-of-sequence token) in the middle of a turn, through a logits processor handed to its own ``generate``."""

from __future__ import annotations

import pytest
from support.tiny_model import ForceAt

pytest.importorskip("transformers")


def test_a_pad_token_sampled_mid_turn_is_kept(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

    from rag_curriculum.train import PolicyBackend, TurnSampling

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    pad, eos = tok.pad_token_id, tok.eos_token_id
    assert pad != eos
    backend = PolicyBackend(model, tok)
    messages = [{"role": "user", "content": "Who founded the city?"}]
    start = len(backend.prompt_ids(messages))
    forced = {2: pad, 3: pad}
    seen = {}
    original = model.generate

    def generate(**kw):
        out = original(**kw, logits_processor=LogitsProcessorList([ForceAt(start, forced)]))
        seen["new"] = out[0, start:].tolist()
        return out

    model.generate = generate
    # stop strings no random model writes: the turn runs its whole budget of 8 tokens, pads inside it
    text = backend.generate([messages], TurnSampling(max_tokens=8, seed=1), stop=["</answer-never>"])[0][0]
    sampled = seen["new"]
    assert len(sampled) == 8 and sampled[2] == sampled[3] == pad and eos not in sampled
    piece = backend.completion(messages[0]["content"], text)
    assert piece.ids == sampled and piece.mask == [1] * 8  # every sampled token, the pads included
    assert text == tok.decode(sampled, skip_special_tokens=True)
    # trailing padding of a row that finished early (eos) is not the model's: cut after the eos
    forced.clear()
    forced.update({1: eos})
    text2 = backend.generate([messages], TurnSampling(max_tokens=6, seed=2), stop=["</answer-never>"])[0][0]
    assert backend.completion(messages[0]["content"], text2).ids == seen["new"][:2]
