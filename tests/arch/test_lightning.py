"""MiniMax's lightning attention: the block loop's cost checked against FlopCounterMode on
transformers' own `MiniMaxLightningAttention`, and the explainer's note."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.lightning import Lightning, lightning_backward, lightning_flops
from tuneproof.arch.mixers import mixer_flops

BLOCK = 16


@pytest.mark.parametrize("length", [1, 7, 16, 40])
def test_lightning_flops_match_flop_counter_on_transformers_own_block_loop(length: int) -> None:
    """One token, a partial block, exactly one block, two blocks and a partial one. The module's
    three projections are frozen, so each costs its forward GEMM once more in backward (the input
    gradient): what is left is the block loop's."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    heads, d, hidden = 2, 8, 32
    cfg = MiniMaxConfig(
        hidden_size=hidden, num_attention_heads=heads, head_dim=d, block_size=BLOCK, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    mod = MiniMaxLightningAttention(cfg, 0).requires_grad_(False)
    x = torch.randn(1, length, hidden, generator=torch.Generator().manual_seed(0), requires_grad=True)
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out, _ = mod(x, None, None)
    with backward:
        out.sum().backward()
    projections = 2.0 * length * hidden * (3 * heads * d + heads * d) + 2.0 * length * heads * d * hidden
    rule = Lightning(q="q", k="k", v="v", dst="o", heads=heads, head_dim=d, block=BLOCK)
    assert lightning_flops(rule, length) == forward.get_total_flops() - projections
    assert lightning_backward(rule, length) == backward.get_total_flops() - projections


def test_lightning_blocks_are_not_padded_and_have_no_convolution() -> None:
    rule = Lightning(q="q", k="k", v="v", dst="o", heads=4, head_dim=16, block=BLOCK)
    core, conv, back = mixer_flops(rule, 20)
    assert core == lightning_flops(rule, 16) + lightning_flops(rule, 4) < lightning_flops(rule, 32)
    assert conv == 0.0 and back == lightning_backward(rule, 20)


def test_minimax_lightning_layers_are_read_and_explained() -> None:
    from contexts import context
    from tiny_models import shrunk_config
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config("minimax")).shape
    assert [layer.attention.kind for layer in shape.layers] == ["full", "linear"]
    (core,) = (s for s in shape.layers[1].steps if isinstance(s, Lightning))
    assert core.block == BLOCK  # tests/tiny_models.py shrinks the block to 16
    plain = " ".join(explain(shape, context(seq_len=512, batch=1), live=False).notes)
    assert "no kernel" in plain and "block loop" in plain and "gated delta" not in plain
    packed = " ".join(explain(shape, context(seq_len=512, batch=1, packed=True), live=False).notes)
    assert "share one decayed key-value state" in packed
