"""ZAYA's compressed convolutional attention: the q/k convolutions' cost checked against
FlopCounterMode on transformers' own ZayaCCAProjection at several lengths, and ZAYA's layers read as
softmax attention on the convolved q/k."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.cca import CcaConv, cca_conv_flops, cca_core

SIZES = dict(
    hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, moe_intermediate_size=16,
    num_experts=4, router_hidden_size=16, vocab_size=64,
)  # fmt: skip


def _config(layer_types: list[str], t0: int = 2, t1: int = 3) -> object:
    from transformers import ZayaConfig

    return ZayaConfig(
        **SIZES,
        num_hidden_layers=len(layer_types),
        layer_types=layer_types,
        cca_time0=t0,
        cca_time1=t1,
        sliding_window=16,
    )


@pytest.mark.parametrize("length", [1, 7, 33])
@pytest.mark.parametrize("kernels", [(2, 2), (3, 4)])
def test_cca_flops_match_flop_counter_on_transformers_own_projection(
    length: int, kernels: tuple[int, int]
) -> None:
    """ZayaCCAProjection.forward with no cache: its four projections (one of them run once more on
    the zero row of the delayed value) and the two convolutions are all the FLOPs it runs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.zaya.modeling_zaya import ZayaAttention

    cfg = _config(["hybrid"], *kernels)
    torch.manual_seed(0)
    attention = ZayaAttention(cfg, 0)
    batch, h = 2, cfg.hidden_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    counter = FlopCounterMode(display=False)
    with counter:
        attention.qkv_proj(torch.randn(batch, length, h), None)
    projections = 2 * batch * length * h * (q + kv + kv)  # q, k, and the two value halves
    zero_row = 2 * batch * h * kv // 2  # v_proj_delayed on one zero row per sequence (not costed)
    conv = cca_core(attention)
    assert conv == CcaConv(
        q="q",
        k="k",
        v="v",
        dst="qk",
        channels=q + kv,
        depthwise_kernel=kernels[0],
        grouped_kernel=kernels[1],
        group_width=cfg.head_dim,
    )
    assert counter.get_total_flops() == projections + zero_row + batch * cca_conv_flops(conv, length)


def test_zaya_layers_are_softmax_attention_on_convolved_q_and_k() -> None:
    from tuneproof.arch.shape import Attention

    shape = resolve(_config(["hybrid", "hybrid_sliding"])).shape
    full, sliding = (layer.attention for layer in shape.layers)
    assert full.kind == "full" and (sliding.kind, sliding.window) == ("sliding", 16) and full.head_dim == 8
    steps = shape.layers[0].steps
    (conv,) = [s for s in steps if isinstance(s, CcaConv)]
    (attention,) = [s for s in steps if isinstance(s, Attention)]
    assert (conv.q, conv.k) == ("mix.q_proj", "mix.k_proj") and attention.q == attention.k == "mix.qk"


def test_explain_says_the_cca_convolutions_run_in_torch() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(_config(["hybrid", "hybrid"])).shape
    notes = explain(shape, context(seq_len=64, batch=1, attn="sdpa"), live=False).notes
    assert any(n.startswith("2 layers use ZAYA's compressed convolutional attention") for n in notes)
