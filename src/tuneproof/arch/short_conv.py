"""LFM2's gated short-convolution mixer (lfm2, lfm2_moe, lfm3), as transformers' torch path computes
it when the causal-conv1d kernels are absent.

Legend: T tokens of one sequence, H the hidden size (the convolution's channels), K its taps
(`conv_L_cache`).

What one mixer runs (transformers 5.x models/lfm2/modeling_lfm2.py `Lfm2ShortConv.forward` and its
copies `Lfm2MoeShortConv.forward`, `Lfm3ShortConv.forward`): in_proj (an nn.Linear, H -> 3H), split
into B, C and x; B * x (elementwise); `causal_conv1d_fn`, a depthwise F.conv1d padded K - 1 on both
sides and sliced to T; C * the convolution's output (elementwise); out_proj (an nn.Linear, H -> H).
The two projections are the layer program's GEMMs; the core between them costs only the
convolution: the gating products are elementwise and no matmul runs there.

Intended and performed are the same here, as for the delta rule's and the SSD's convolutions: both
count the T + K - 1 output positions the padded F.conv1d computes (K - 1 more per sequence than the
T it keeps; the causal-conv1d kernel computes only T).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core

# Mixers that run `causal_conv1d_fn` between a 3H input projection and an output projection with
# B / C gating, by class name: the cost below is checked against FlopCounterMode on that function
# and on each family's tiny build.
SHORT_CONV_MIXERS = frozenset({"Lfm2ShortConv", "Lfm2MoeShortConv", "Lfm3ShortConv"})


@dataclass(kw_only=True, frozen=True, slots=True)
class ShortConv(Core):
    """A gated depthwise causal convolution of `conv_kernel` taps over `conv_channels` channels,
    with no state and no score matrix. Reads one node (in_proj's B, C, x) as q, k and v alike
    (`short_conv_flops`)."""

    conv_channels: int
    conv_kernel: int


def short_conv_flops(conv: ShortConv, length: int) -> float:
    """Forward FLOPs of the convolution on one sequence of `length` tokens: K taps per channel on
    T + K - 1 output positions (`causal_conv1d_fn`: F.conv1d with padding K - 1, groups H, then the
    slice to T), 2 x H x K x (T + K - 1)."""
    if length <= 0:
        return 0.0
    return 2.0 * conv.conv_channels * conv.conv_kernel * (length + conv.conv_kernel - 1)


def short_conv_costs(conv: Any, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core): the core outside the convolution is the
    two elementwise gates, no matmul, forward or backward (the convolution's backward is the
    ledger's `linear_attention.conv` row)."""
    return 0.0, short_conv_flops(conv, length), 0.0


def short_conv_core(mod: Any) -> tuple[AttentionSpec, ShortConv]:
    """The geometry and core of a built short-convolution mixer (one of SHORT_CONV_MIXERS). The spec
    has one head of `K` key width and `H` value width, chunk 1: every token's output reads its own
    K - 1 predecessors, no state crosses a chunk."""
    weight = mod.conv.weight  # (H, 1, K): depthwise
    channels, taps = int(weight.shape[0]), int(weight.shape[-1])
    core = ShortConv(q="q", k="k", v="v", dst="attn", conv_channels=channels, conv_kernel=taps)
    return AttentionSpec(
        kind="linear", window=None, num_heads=1, num_kv_heads=1, head_dim=taps, v_head_dim=channels, chunk=1
    ), core


_CONV_PATHS = (
    "{count} short-convolution layers ({label}, LFM2 gated conv): the attention path does not apply "
    "to them. transformers runs causal-conv1d's causal_conv1d_fn where the kernels hub provides it "
    "(CUDA), else a torch depthwise F.conv1d padded K - 1 on both sides and sliced to T{packed}"
)
_CONV_PACKED = (
    "; this batch is packed, and the torch fallback takes the forward's kwargs and drops its cu_seqlens, "
    "so each document's first K - 1 tokens read the previous document's last ones"
)


def short_conv_note(count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's line for `count` short-convolution layers of geometry `label`."""
    return _CONV_PATHS.format(count=count, label=label, packed=_CONV_PACKED if packed else "")


@dataclass(kw_only=True, frozen=True, slots=True)
class DilatedConv(Core):
    """A depthwise causal convolution of `conv_kernel` taps `dilation` apart, left-padded by
    (conv_kernel - 1) x dilation and so computing exactly T outputs (Qwen4-Exp's PLE convolution,
    transformers models/qwen4_exp/modeling_qwen4_exp.py `Qwen4ExpTextPLELayer._short_conv`: F.pad, then
    the nn.Conv1d with dilation). Reads one node as q, k and v alike."""

    conv_channels: int
    conv_kernel: int
    dilation: int


def dilated_conv_costs(conv: Any, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core): K taps per channel on T outputs."""
    return 0.0, 2.0 * conv.conv_channels * conv.conv_kernel * max(length, 0), 0.0
