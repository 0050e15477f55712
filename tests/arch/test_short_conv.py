"""LFM2's gated short convolution (lfm2, lfm2_moe, lfm3): its cost checked against FlopCounterMode on
transformers' own torch functions, and its layers read as costed short-convolution mixers."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.short_conv import ShortConv, short_conv_costs, short_conv_flops

SIZES = dict(
    hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, vocab_size=64
)


@pytest.mark.parametrize("length", [1, 5, 16, 37])
def test_conv_flops_match_flop_counter_on_transformers_own_conv(length: int) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.lfm2.modeling_lfm2 import causal_conv1d_fn

    channels, taps = 12, 3
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, channels, length, generator=gen, requires_grad=True)
    w = torch.randn(channels, taps, generator=gen, requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        causal_conv1d_fn(x, w, None)
    conv = ShortConv(q="q", k="k", v="v", dst="o", conv_channels=channels, conv_kernel=taps)
    assert counter.get_total_flops() == 2 * short_conv_flops(conv, length)  # a batch of two


@pytest.mark.parametrize("length", [1, 9, 40])
def test_the_gates_cost_nothing_beyond_the_projections_and_the_conv(length: int) -> None:
    """Lfm3ShortConv.forward end to end: in_proj, out_proj and the convolution are all it runs as
    FLOPs forward; backward, every op but the convolution's is a projection's (the core has none)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Lfm3Config
    from transformers.models.lfm3.modeling_lfm3 import Lfm3ShortConv

    cfg = Lfm3Config(**SIZES, num_hidden_layers=1, layer_types=["conv"])
    torch.manual_seed(0)
    mod = Lfm3ShortConv(cfg, 0)
    h, taps = cfg.hidden_size, cfg.conv_L_cache
    x = torch.randn(1, length, h, requires_grad=True)
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        y = mod(x)
    with backward:
        y.sum().backward()
    core, conv, core_back = short_conv_costs(
        ShortConv(q="q", k="k", v="v", dst="o", conv_channels=h, conv_kernel=taps), length
    )
    projections = 2 * length * h * 3 * h + 2 * length * h * h
    assert forward.get_total_flops() == projections + core + conv
    ops = {str(k): v for k, v in backward.get_flop_counts()["Global"].items()}
    ops.pop("aten.convolution_backward")
    assert sum(ops.values()) == 2 * projections + core_back  # dX and dW of each projection


def test_a_conv_layer_is_a_costed_short_convolution() -> None:
    from transformers import Lfm2Config

    cfg = Lfm2Config(**SIZES, num_hidden_layers=2, layer_types=["conv", "full_attention"])
    conv_layer, attention_layer = resolve(cfg).shape.layers
    cores = [s for s in conv_layer.steps if isinstance(s, ShortConv)]
    assert [(c.conv_channels, c.conv_kernel) for c in cores] == [(32, cfg.conv_L_cache)]
    assert not conv_layer.attention.softmax and attention_layer.attention.softmax


def test_explain_names_the_conv_kernels_and_the_torch_fallback() -> None:
    from transformers import Lfm2Config

    from contexts import context
    from tuneproof.attention.dispatch import explain

    cfg = Lfm2Config(**SIZES, num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"])
    notes = explain(resolve(cfg).shape, context(seq_len=64, batch=1, attn="sdpa"), live=False).notes
    conv = [n for n in notes if "short-convolution" in n]
    assert len(conv) == 1 and conv[0].startswith("2 short-convolution layers")
    assert "causal_conv1d_fn" in conv[0] and "F.conv1d" in conv[0]
