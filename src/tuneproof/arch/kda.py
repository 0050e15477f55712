"""Kimi Delta Attention (KDA): the delta rule with a per-channel forget gate, as Kimi Linear and
Bailing-hybrid (Ling 2.5) run it, costed in transformers' chunked torch form.

Source (transformers 5.x): models/kimi_linear/modeling_kimi_linear.py `chunk_kimi_delta_attention`
(chunk_size=64) and `KimiLinearDeltaAttention`; models/bailing_hybrid/modeling_bailing_hybrid.py
holds the same function, character for character, behind `BailingHybridDeltaAttention`.

Convention: matmul FLOPs, as FlopCounterMode counts them. KDA's gate is a vector per channel, so the
torch path cannot fold the decay into a matrix product: it builds the intra-chunk scores
(k_beta . k and q . k under the decay, C x C x dk multiply-adds each per chunk) as broadcast
products summed over the key dim, and solves the triangular system row by row with the same
elementwise sums. Those are real work that no matmul op records; they are left out here, as
FlopCounterMode leaves them out (flash-linear-attention's chunk_kda runs them as matmuls on CUDA).
Intended and performed are the same count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core

# chunk_kimi_delta_attention(chunk_size=64): neither family's layer passes another chunk
KDA_CHUNK = 64


@dataclass(kw_only=True, frozen=True, slots=True)
class KimiDelta(Core):
    """Kimi Delta Attention in its chunked form (`chunk_kimi_delta_attention`): chunks of `chunk`
    tokens (the sequence padded up to a whole chunk), a (key_dim x value_dim) state per head; before
    it a depthwise causal convolution of `conv_kernel` taps over `conv_channels` channels (q, k and
    v together)."""

    heads: int
    key_dim: int
    value_dim: int
    chunk: int
    conv_channels: int
    conv_kernel: int


def kda_flops(rule: KimiDelta, length: int) -> tuple[float, float]:
    """Forward FLOPs of one sequence of `length` tokens through a KDA layer: (the chunked rule's
    matmuls, the causal convolution), padded to whole chunks as the torch path pads.

    Per head and chunk of C tokens (dk key, dv value dims): the solved system applied to v_beta
    (C x C x dv) and to the decayed k_beta (C x C x dk), the intra-chunk scores @ v_new (C x C x dv),
    and against the running state (q * decay) @ S, k_cumdecay @ S and the state update
    k^T @ v_new (C x dk x dv each). The convolution is depthwise: conv_kernel taps per channel on
    T + conv_kernel - 1 output positions (`causal_conv1d_fn` pads both sides, then slices)."""
    if length <= 0:
        return 0.0, 0.0
    c, dk, dv = rule.chunk, rule.key_dim, rule.value_dim
    chunks = -(-length // c)
    per_chunk = 2.0 * (c * c * (2 * dv + dk) + 3 * c * dk * dv)
    conv = 2.0 * rule.conv_channels * rule.conv_kernel * (length + rule.conv_kernel - 1)
    return rule.heads * chunks * per_chunk, conv


def kda_backward(rule: KimiDelta, length: int) -> float:
    """Backward FLOPs of `kda_flops`'s matmuls when q, k, v, the gate and beta need gradients
    (checked against FlopCounterMode on `chunk_kimi_delta_attention`): two input gradients per
    matmul, except that the state is zeros before the first chunk (its two state matmuls need one
    gradient each) and the last chunk's state update feeds nothing (no backward at all). Unlike the
    gated delta rule's, the triangular solve is elementwise and adds no matmul to the backward."""
    if length <= 0:
        return 0.0
    forward, _ = kda_flops(rule, length)
    state_mm = rule.heads * 2.0 * rule.chunk * rule.key_dim * rule.value_dim
    return 2 * forward - 4 * state_mm


def kda_costs(rule: Any, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core): the entry in `mixers.CORE_COSTS`."""
    f, c = kda_flops(rule, length)
    return f, c, kda_backward(rule, length)


# Mixer classes that call `chunk_kimi_delta_attention` (checked on each family's tiny build).
KDA_MIXERS = frozenset({"KimiLinearDeltaAttention", "BailingHybridDeltaAttention"})

# The forget gate's parameters used elementwise, no GEMM: Kimi Linear stores A_log as (1, 1, heads, 1)
# and scales the gate by exp(A_log) (`KimiLinearForgetGate.forward`).
KDA_ELEMENTWISE = frozenset({"A_log"})


def read_kda(mod: Any) -> tuple[AttentionSpec, KimiDelta]:
    """A KDA layer's geometry and core, from the built module's own fields: num_heads heads of
    head_dim for q, k and v alike (the forget gate spans num_heads x head_dim)."""
    heads, dim = int(mod.num_heads), int(mod.head_dim)
    channels, taps = int(mod.conv1d.weight.shape[0]), int(mod.conv1d.weight.shape[-1])
    core = KimiDelta(
        q="q",
        k="k",
        v="v",
        dst="attn",
        heads=heads,
        key_dim=dim,
        value_dim=dim,
        chunk=KDA_CHUNK,
        conv_channels=channels,
        conv_kernel=taps,
    )
    return AttentionSpec(
        kind="linear",
        window=None,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=dim,
        v_head_dim=dim,
        chunk=KDA_CHUNK,
    ), core


def kda_note(count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's note for KDA layers: which kernels transformers looks up
    (models/kimi_linear/modeling_kimi_linear.py `use_kernel_func_from_hub_with_fallback`, in the
    order integrations/hub_kernels.py tries them) and whether packed documents stay apart."""
    note = (
        f"{count} linear-attention layers ({label}, Kimi Delta Attention): the attention path does not "
        "apply to them. transformers runs the kernels hub's chunk_kda (kernels-community/fla; training on "
        "CUDA only) when kernels are enabled, else flash-linear-attention's fla.ops.kda.chunk_kda where "
        "it is installed, else torch chunk_kimi_delta_attention (chunks of 64 tokens, padded to a whole "
        "chunk); the convolution is causal-conv1d's causal_conv1d_fn where installed, else a torch "
        "depthwise conv1d. fused_recurrent_kda serves one-token decoding only"
    )
    if packed:
        note += (
            "; this batch is packed, and the layer forwards no cu_seqlens to any of them (the batch's "
            "cu_seq_lens_q is passed under that name, which no KDA kernel reads), so its documents "
            "share one recurrent state and one convolution window on every path"
        )
    return note
