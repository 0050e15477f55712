"""Recurrent mixers whose recurrence is elementwise: Griffin's RG-LRU (RecurrentGemma) and RWKV-4's
WKV time mixing, as transformers' torch paths compute them.

Legend: T tokens of one sequence, W the recurrent width (`lru_width` for the RG-LRU,
`attention_hidden_size` for RWKV), H the RG-LRU's heads, W / H its block width, K the convolution's taps.

Neither recurrence runs a matmul: each step multiplies and adds per channel, so its FLOPs in the
matmul convention (`tuneproof.flops.ledger`) are 0, as FlopCounterMode counts them; the elementwise
work of the scan (W multiply-adds per token and more) is not counted, in either ledger. Only the
projections around it count, and for the RG-LRU its two gate matmuls and its convolution.

What runs (transformers 5.x):
- models/recurrent_gemma/modeling_recurrent_gemma.py `RecurrentGemmaRecurrentBlock.forward`:
  linear_y (then GeLU), linear_x, the depthwise causal `conv_1d` (nn.Conv1d padded K - 1 on both
  sides, sliced to T), `RecurrentGemmaRglru.forward`: two `torch.baddbmm` of each head's slice of
  the activations with its (W/H x W/H) gate weight, (H, B*T, W/H) @ (H, W/H, W/H) (a block-diagonal
  GEMM: 2 x T x W x W/H FLOPs each), elementwise gating, then `_rnn_scan`: a Python loop over T
  steps of `a_t * h + x_t`, elementwise; then the product with the y branch and linear_out.
- models/rwkv/modeling_rwkv.py `RwkvSelfAttention.forward`: the time-shift mix (elementwise),
  key / value / receptance (nn.Linear), `rwkv_linear_attention`: the CUDA kernel where loaded, else
  `rwkv_linear_attention_cpu`, a Python loop over T steps of exp / max / multiply-add per channel;
  then `output(receptance * wkv)`.

Intended and performed are the same: the recurrences need no matmul, and the per-step loops run
exactly the elementwise work the algorithm defines (sequential in T, where a fused kernel would scan
in one pass); the gates and the convolution run once per token on either path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core, Join, Linear, Op

# Recurrent blocks that run `RecurrentGemmaRglru` after a depthwise convolution, by class name: the
# cost below is checked against FlopCounterMode on that module and on the family's tiny build.
RGLRU_MIXERS = frozenset({"RecurrentGemmaRecurrentBlock"})
# Modules whose 3-D parameters are per-head (heads, in, out) gate weights applied to every token by
# one batched matmul (a block-diagonal GEMM), not routed experts: `RecurrentGemmaRglru.forward`.
BLOCK_DIAGONAL = frozenset({"RecurrentGemmaRglru"})
# RWKV-4 time mixers that run `rwkv_linear_attention` between their projections, by class name.
WKV_MIXERS = frozenset({"RwkvSelfAttention"})
# Feed-forward blocks whose output is an elementwise gate times their last GEMM's output, which the
# multiply saves for backward: `RwkvFeedForward.forward` returns sigmoid(receptance(x)) * value(k).
GATED_FFN = frozenset({"RwkvFeedForward"})


@dataclass(kw_only=True, frozen=True, slots=True)
class RgLru(Core):
    """The RG-LRU's depthwise causal convolution (`conv_kernel` taps over `conv_channels` channels)
    and its elementwise linear recurrence over `width` channels (no matmul: 0 FLOPs). Reads the
    linear_x projection as q, k and v alike; its two block-diagonal gate GEMMs are `Linear` steps
    after it (`rglru_steps`), so that LoRA and full fine-tuning see their weights."""

    width: int
    conv_channels: int
    conv_kernel: int


@dataclass(kw_only=True, frozen=True, slots=True)
class Wkv(Core):
    """RWKV-4's WKV recurrence over `width` channels, each with scalar numerator, denominator and
    running-max states: elementwise exp / max / multiply-add per token, no matmul (0 FLOPs)."""

    width: int


def rglru_conv_flops(core: RgLru, length: int) -> float:
    """Forward FLOPs of the RG-LRU block's convolution on one sequence of `length` tokens: K taps per
    channel on T + K - 1 output positions (nn.Conv1d with padding K - 1, groups W, then the slice
    to T), 2 x W x K x (T + K - 1)."""
    if length <= 0:
        return 0.0
    return 2.0 * core.conv_channels * core.conv_kernel * (length + core.conv_kernel - 1)


def rglru_costs(core: Any, length: int) -> tuple[float, float, float]:
    """(forward recurrence, forward convolution, backward recurrence): the scan `_rnn_scan` is
    elementwise, 0 matmul FLOPs forward and backward (its elementwise work is not counted)."""
    return 0.0, rglru_conv_flops(core, length), 0.0


def wkv_costs(core: Any, length: int) -> tuple[float, float, float]:
    """(forward, convolution, backward) of `rwkv_linear_attention_cpu`: 0, 0, 0. Its loop is
    elementwise (exp, maximum, multiply-add per channel and token: not counted), and it has no
    convolution."""
    return 0.0, 0.0, 0.0


def rglru_core(mod: Any) -> tuple[AttentionSpec, RgLru]:
    """The geometry and core of a built RG-LRU recurrent block (one of RGLRU_MIXERS). The spec has
    H heads of W/H channels, each channel a scalar state; chunk 1: the torch path steps one token
    at a time."""
    lru = mod.rg_lru
    heads, block = int(lru.num_attention_heads), int(lru.block_width)
    weight = mod.conv_1d.weight  # (W, 1, K): depthwise
    core = RgLru(
        q="q",
        k="k",
        v="v",
        dst="attn",
        width=int(mod.lru_width),
        conv_channels=int(weight.shape[0]),
        conv_kernel=int(weight.shape[-1]),
    )
    return AttentionSpec(
        kind="linear",
        window=None,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=block,
        v_head_dim=block,
        chunk=1,
    ), core


def wkv_core(mod: Any) -> tuple[AttentionSpec, Wkv]:
    """The geometry and core of a built RWKV time mixer (one of WKV_MIXERS): W independent channels
    of scalar state (W heads of width 1), chunk 1: the torch path steps one token at a time."""
    width = int(mod.attention_hidden_size)
    return AttentionSpec(
        kind="linear", window=None, num_heads=width, num_kv_heads=width, head_dim=1, v_head_dim=1, chunk=1
    ), Wkv(q="q", k="k", v="v", dst="attn", width=width)


def rglru_steps(units: list[Any], hidden: int, core: Core) -> list[Op]:
    """The recurrent block's dataflow (`RecurrentGemmaRecurrentBlock.forward`): linear_y and linear_x
    read the layer input; the convolution and recurrence read linear_x only; the two gate GEMMs read
    the convolution's output (their weights are 3-D parameters: no LoRA adapter runs on them); the
    recurrence's output times the y branch feeds linear_out. `units`: the block's GEMMs as
    `tuneproof.arch.construct` reads them (the gates with kind "block")."""
    by_leaf = {u.leaf: u for u in units if u.kind != "block"}
    y, x, out = by_leaf["linear_y"], by_leaf["linear_x"], by_leaf["linear_out"]
    steps: list[Op] = [
        Linear(
            name=y.name,
            in_features=y.in_features,
            out_features=y.out_features,
            src="in",
            dst="mix.y",
            component="attention.proj",
        ),
        Linear(
            name=x.name,
            in_features=x.in_features,
            out_features=x.out_features,
            src="in",
            dst="mix.x",
            component="attention.proj",
        ),
        replace(core, q="mix.x", k="mix.x", v="mix.x", dst="lru.conv"),
    ]
    gates = [u for u in units if u.kind == "block"]
    for i, g in enumerate(gates):
        steps.append(
            Linear(
                name=g.name,
                in_features=g.in_features,
                out_features=g.out_features,
                src="lru.conv",
                dst=f"lru.gate{i}",
                component="rg_lru.gates",
                adaptable=False,
            )
        )
    steps.append(Join("attn", ("lru.conv", *(f"lru.gate{i}" for i in range(len(gates))), "mix.y")))
    steps.append(
        Linear(
            name=out.name,
            in_features=out.in_features,
            out_features=out.out_features,
            src="attn",
            dst="o",
            component="o_proj",
        )
    )
    steps.append(Join("mid", ("in", "o")))
    return steps


_RGLRU_PATHS = (
    "{count} recurrent layers ({label}, Griffin RG-LRU): the attention path does not apply to them. "
    "transformers offers no fused kernel for this block: RecurrentGemmaRglru runs two torch.baddbmm "
    "gate GEMMs and _rnn_scan, a Python loop over the tokens (elementwise, sequential in T), after a "
    "torch depthwise nn.Conv1d, on every device{packed}"
)
_WKV_PATHS = (
    "{count} RWKV time-mixing layers ({label}): the attention path does not apply to them. transformers "
    "runs the `kernels` hub's kernels-community/rwkv WKV CUDA kernel when it is installed, ninja and "
    "CUDA are present and every tensor is on the GPU (and more than one token is fed), else "
    "rwkv_linear_attention_cpu, a Python loop over the tokens (elementwise, sequential in T){packed}"
)
_RGLRU_PACKED = (
    "; this batch is packed: the recurrence resets only where position_ids is 0, and the convolution "
    "reads across document boundaries"
)
_WKV_PACKED = (
    "; this batch is packed, and the WKV recurrence takes no document boundaries, so its documents "
    "share one state"
)


def recurrent_note(core: Core, count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's line for `count` layers of an elementwise-recurrence mixer."""
    if isinstance(core, RgLru):
        return _RGLRU_PATHS.format(count=count, label=label, packed=_RGLRU_PACKED if packed else "")
    return _WKV_PATHS.format(count=count, label=label, packed=_WKV_PACKED if packed else "")
