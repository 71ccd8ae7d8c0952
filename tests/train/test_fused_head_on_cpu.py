"""TRL's fused LM head on the CPU, narrowed to the completion's positions by the curriculum trainer
(rag_curriculum.train._trainer.score_completions_only_on_cpu): the per-token log-probabilities and entropies of the
completion positions, and their gradients, are the ones TRL computes when it scores every position."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")


def test_scoring_only_the_completion_gives_trls_log_probs_and_gradients(tiny_model_dir):
    import trl.trainer.utils as trl_utils

    if not hasattr(trl_utils, "add_fused_lm_head"):  # the trl-oldest tier: TRL 1.0 scores every position itself
        pytest.skip(f"TRL {__import__('trl').__version__} has no fused LM head (nothing for the trainer to narrow)")
    from transformers import AutoModelForCausalLM

    from rag_curriculum.train._trainer import score_completions_only_on_cpu

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 20))
    labels = ids.clone()
    labels[:, :14] = -100  # the prompt
    labels[1, 18:] = -100  # a shorter completion

    def run():
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + out.entropy.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return out.log_probs.detach(), out.entropy.detach(), grads

    decide = trl_utils._use_triton
    try:
        every = run() if not getattr(decide, "completions_only_on_cpu", False) else None
        assert score_completions_only_on_cpu() and trl_utils._use_triton(torch.device("cpu"))
        if every is None:  # already switched in this process: compare with TRL's own decision
            trl_utils._use_triton = lambda device: False
            every = run()
            trl_utils._use_triton = decide
        only = run()
    finally:
        pass
    mask = labels[:, 1:] != -100
    torch.testing.assert_close(only[0][mask], every[0][mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(only[1][mask], every[1][mask], rtol=1e-5, atol=1e-5)
    assert (only[0][~mask] == 0).all()
    for a, b in zip(only[2], every[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
