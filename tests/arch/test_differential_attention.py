"""DiffLlama's differential attention: DiffLlamaAttention.forward calls the attention interface twice
per layer (same q and k, the two halves of V), so both ledgers count two score maps and two AV
products per layer, on every path; checked against FlopCounterMode on transformers' own module."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.shape import Attention
from tuneproof.flops import Step, flop_report


def _diffllama_config() -> object:
    from transformers import DiffLlamaConfig

    return DiffLlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        attn_implementation="eager",
    )


def _counted_attention(length: int) -> tuple[float, float]:
    """(forward, backward) FLOPs of DiffLlamaAttention's attention matmuls (the projections' mm and
    addmm left out) at `length` tokens, eager, its inputs needing gradients."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention, DiffLlamaRotaryEmbedding

    cfg = _diffllama_config()
    attn = DiffLlamaAttention(cfg, layer_idx=0)
    x = torch.randn(1, length, 64, requires_grad=True)
    pos = DiffLlamaRotaryEmbedding(cfg)(x, torch.arange(length)[None])
    mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out, _ = attn(x, pos, attention_mask=mask)
    with backward:
        out.sum().backward()

    def bmm(counter: FlopCounterMode) -> float:
        return float(sum(v for k, v in counter.get_flop_counts()["Global"].items() if "bmm" in str(k)))

    return bmm(forward), bmm(backward)


def test_a_diffllama_layer_runs_two_attention_calls_on_the_same_q_and_k() -> None:
    shape = resolve(_diffllama_config()).shape
    calls = [s for s in shape.layers[0].steps if isinstance(s, Attention)]
    assert len(calls) == 2 and {(s.q, s.k) for s in calls} == {("mix.q", "mix.k")}


@pytest.mark.parametrize("length", [8, 24, 40])
def test_diffllama_attention_flops_match_flop_counter_on_transformers_own_module(length: int) -> None:
    shape = resolve(_diffllama_config()).shape
    run = Step(seq_len=length, batch=1, attn="eager", mode="full")
    ledger = flop_report(shape, run).performed
    rows = [r for r in ledger.rows if r.layer == 0 and r.component.startswith("attention.")]
    forward = sum(r.flops for r in rows if r.pass_ == "forward")
    backward = sum(r.flops for r in rows if r.pass_ == "backward")
    counted_forward, counted_backward = _counted_attention(length)
    # eager computes the whole square: 2 calls x (QK^T + AV) x 2 T^2 H D
    assert forward == counted_forward == 2 * 2 * (2.0 * length * length * 4 * 16)
    assert backward == counted_backward == 2 * forward


def test_explainer_says_diffllama_runs_each_kernel_twice() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(_diffllama_config()).shape
    notes = explain(shape, context(attn="sdpa", seq_len=64, batch=1), live=False).notes
    assert any("twice" in n and "DiffLlamaAttention" in n for n in notes)
