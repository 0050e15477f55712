"""Kimi Delta Attention (Kimi Linear, Bailing-hybrid): the chunked cost checked against FlopCounterMode
on transformers' own `chunk_kimi_delta_attention`, the layers read from each family's tiny build, and
the explainer's note on its kernels and packed rows."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.kda import KDA_CHUNK, KimiDelta, kda_backward, kda_flops
from tuneproof.arch.mixers import mixer_flops

FAMILIES = ("kimi_linear", "bailing_hybrid")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", [1, 37, 64, 130])
def test_kda_flops_match_flop_counter_on_transformers_own_kernel(family: str, length: int) -> None:
    """One token, a partial chunk, exactly one chunk, several chunks with a partial one; both
    families' copies of the function (the same kernel, so one cost)."""
    import importlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    kernel = importlib.import_module(
        f"transformers.models.{family}.modeling_{family}"
    ).chunk_kimi_delta_attention
    heads, dk, dv = 2, 16, 8
    rule = KimiDelta(
        q="q",
        k="k",
        v="v",
        dst="o",
        heads=heads,
        key_dim=dk,
        value_dim=dv,
        chunk=KDA_CHUNK,
        conv_channels=1,
        conv_kernel=4,
    )
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, length, heads, dk, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(1, length, heads, dv, generator=gen, requires_grad=True)
    g = (-torch.rand(1, length, heads, dk, generator=gen)).requires_grad_()  # a gate per channel
    beta = torch.rand(1, length, heads, generator=gen, requires_grad=True)
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out, _ = kernel(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    with backward:
        out.sum().backward()
    assert kda_flops(rule, length)[0] == forward.get_total_flops()
    assert kda_backward(rule, length) == backward.get_total_flops()


def test_kda_costs_are_registered_and_linear_in_whole_chunks() -> None:
    rule = KimiDelta(
        q="q",
        k="k",
        v="v",
        dst="o",
        heads=4,
        key_dim=16,
        value_dim=16,
        chunk=KDA_CHUNK,
        conv_channels=192,
        conv_kernel=4,
    )
    core, conv, back = mixer_flops(rule, 128)
    assert (core, back) == (2 * kda_flops(rule, 64)[0], kda_backward(rule, 128))
    assert conv == 2.0 * 192 * 4 * (128 + 3)  # depthwise, T + taps - 1 outputs
    assert mixer_flops(rule, 65)[0] == mixer_flops(rule, 128)[0]  # padded to whole chunks


@pytest.mark.parametrize("family", FAMILIES)
def test_kda_layers_are_read_from_the_tiny_build(family: str) -> None:
    from tiny_models import shrunk_config

    shape = resolve(shrunk_config(family)).shape
    assert [layer.attention.kind for layer in shape.layers] == ["linear", "full"]
    cores = [s for s in shape.layers[0].steps if isinstance(s, KimiDelta)]
    assert len(cores) == 1 and cores[0].chunk == KDA_CHUNK
    assert cores[0].conv_channels == 3 * cores[0].heads * cores[0].key_dim  # q, k and v convolved


def test_explainer_names_the_kda_kernels_and_the_shared_state_of_packed_rows() -> None:
    from contexts import context
    from tiny_models import shrunk_config
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config("kimi_linear")).shape
    plain = " ".join(explain(shape, context(seq_len=512, batch=1), live=False).notes)
    assert "chunk_kda" in plain and "chunk_kimi_delta_attention" in plain and "gated delta" not in plain
    packed = " ".join(explain(shape, context(seq_len=512, batch=1, packed=True), live=False).notes)
    assert "share one recurrent state" in packed and "share one" not in plain
