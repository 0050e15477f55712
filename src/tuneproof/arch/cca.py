"""ZAYA's compressed convolutional attention (CCA): softmax attention whose queries and keys are mixed
by two causal convolutions between their projections and the attention, and whose values are half
the current token's and half the previous token's.

Legend: T tokens of one sequence, C = (heads + kv_heads) x head_dim the convolved q/k channels, t0
and t1 the two kernels (`cca_time0`, `cca_time1`), d the head dim.

What one layer's projection runs (transformers 5.x models/zaya/modeling_zaya.py
`ZayaCCAProjection.forward`): q_proj and k_proj (nn.Linear) on the layer input; their outputs
concatenated, left-padded by (t0 - 1) + (t1 - 1) and run through `conv_qk_depthwise` (a depthwise
nn.Conv1d of t0 taps: T + t1 - 1 outputs) and `conv_qk_grouped` (an nn.Conv1d of t1 taps with one
group per head, d input channels each: T outputs); each then adds its residual (the mean of q and
the repeated k, elementwise); v_proj_current and v_proj_delayed (nn.Linear), the delayed half
shifted one token later. Then `ZayaAttention.forward`: the L2 q/k norm and rotary embedding
(elementwise), the attention interface (sliding for `hybrid_sliding` layers), o_proj.

Intended and performed are the same here: both convolutions compute only the outputs the grouped
one needs. Not counted: with no cache, `v_proj_delayed` also runs once per sequence on one row of
zeros (the delayed value of token 0), 2 x hidden x kv_width / 2 FLOPs a sequence (1 / T of that
projection's own), with its LoRA adapter and, in full fine-tuning, its weight gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tuneproof.arch.shape import Attention, Core, Join, Linear, Op

if TYPE_CHECKING:  # program imports mixers, which imports this module
    from tuneproof.arch.program import Unit
    from tuneproof.arch.shape import ModelShape

# Attention modules whose q/k/v come from a ZayaCCAProjection, by class name.
CCA_ATTENTION = frozenset({"ZayaAttention"})


@dataclass(kw_only=True, frozen=True, slots=True)
class CcaConv(Core):
    """The two q/k convolutions of CCA over `channels` channels: a depthwise one of `depthwise_kernel`
    taps, then a grouped one of `grouped_kernel` taps reading `group_width` channels per output.
    Reads the q and k projections; writes the convolved q/k (`cca_conv_flops`)."""

    channels: int
    depthwise_kernel: int
    grouped_kernel: int
    group_width: int


def cca_conv_flops(conv: CcaConv, length: int) -> float:
    """Forward FLOPs of both convolutions on one sequence of `length` tokens: the depthwise one on
    T + t1 - 1 outputs (2 x C x t0 x (T + t1 - 1)), the grouped one on T outputs with d inputs per
    output channel (2 x C x d x t1 x T)."""
    if length <= 0:
        return 0.0
    t0, t1 = conv.depthwise_kernel, conv.grouped_kernel
    depthwise = 2.0 * conv.channels * t0 * (length + t1 - 1)
    return depthwise + 2.0 * conv.channels * conv.group_width * t1 * length


def cca_costs(conv: Any, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core): everything CCA adds besides its
    convolutions is elementwise (the residual means, the norm), so the core has no matmul; the
    convolutions' backward is the ledger's `linear_attention.conv` row."""
    return 0.0, cca_conv_flops(conv, length), 0.0


def cca_core(mod: Any) -> CcaConv:
    """The convolution core of a built ZayaAttention module."""
    proj = mod.qkv_proj
    grouped = proj.conv_qk_grouped.weight  # (C, d, t1)
    channels, width, t1 = (int(x) for x in grouped.shape)
    t0 = int(proj.conv_qk_depthwise.weight.shape[-1])
    return CcaConv(
        q="q",
        k="k",
        v="v",
        dst="qk",
        channels=channels,
        depthwise_kernel=t0,
        grouped_kernel=t1,
        group_width=width,
    )


_COMPONENTS = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj_current": "v_proj", "v_proj_delayed": "v_proj"}


def cca_steps(units: list[Unit], hidden: int, core: Core) -> list[Op]:
    """The layer's mixer program: the four projections read the layer input; the convolutions read
    q and k; the attention's q and k read the convolutions and both projections (the residuals), its
    v both value halves; o_proj reads the attention."""
    assert isinstance(core, CcaConv)
    by_leaf = {u.leaf: u for u in units}
    steps: list[Op] = []
    for leaf, component in _COMPONENTS.items():
        u = by_leaf[leaf]
        steps.append(
            Linear(
                name=u.name,
                in_features=u.in_features,
                out_features=u.out_features,
                src="in",
                dst=f"mix.{leaf}",
                component=component,
            )
        )
    steps.append(replace(core, q="mix.q_proj", k="mix.k_proj", v="mix.k_proj", dst="mix.conv"))
    steps.append(Join("mix.qk", ("mix.conv", "mix.q_proj", "mix.k_proj")))
    steps.append(Join("mix.v", ("mix.v_proj_current", "mix.v_proj_delayed")))
    steps.append(Attention(q="mix.qk", k="mix.qk", v="mix.v", dst="attn"))
    o = by_leaf["o_proj"]
    steps.append(
        Linear(
            name=o.name,
            in_features=o.in_features,
            out_features=o.out_features,
            src="attn",
            dst="o",
            component="o_proj",
        )
    )
    steps.append(Join("mid", ("in", "o")))
    return steps


def cca_notes(shape: ModelShape) -> list[str]:
    """The dispatch explainer's line for a model's CCA layers (none without them)."""
    count = sum(any(isinstance(s, CcaConv) for s in layer.steps) for layer in shape.layers)
    if not count:
        return []
    return [
        f"{count} layers use ZAYA's compressed convolutional attention (ZayaCCAProjection.forward): "
        "their q/k convolutions always run as torch nn.Conv1d (depthwise, then grouped per head; "
        "transformers offers no fused kernel for them), and the attention itself goes through the "
        "chosen attention path like any softmax layer"
    ]
