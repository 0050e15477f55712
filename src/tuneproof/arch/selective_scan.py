"""Mamba-1's selective state-space scan (mamba, falcon_mamba, jamba), as transformers' torch path
computes it when the CUDA kernels are absent.

Legend: T tokens of one sequence, D the mixer's inner width (`intermediate_size`), N the state width
(`ssm_state_size`), K the convolution's taps (`conv_kernel_size`), r the time-step rank.

What one mixer runs (transformers 5.x models/mamba/modeling_mamba.py `MambaMixer.forward` and its
copies `FalconMambaMixer.forward`, `JambaMambaMixer.forward`): in_proj (an nn.Linear), the depthwise
causal convolution (`causal_conv1d_fn`: F.conv1d padded K - 1 on both sides, sliced to T), x_proj
(an nn.Linear), then `self.dt_proj.weight @ time_step`: a matmul with dt_proj's weight that never
calls the nn.Linear module, so a LoRA adapter PEFT puts on dt_proj never runs (the ledger counts it as
a plain, non-adaptable GEMM; `tests/arch/test_selective_scan.py` shows the adapter adds no FLOP). Then
`mamba_selective_scan`: the discretisation (exp(A dt), dt B x) is elementwise, and its recurrent
branch loops over the T time steps, each running `torch.matmul(ssm_state, C[:, t])`, a
(D x N) @ (N x 1) product per sequence; then D's skip and the gate, elementwise; out_proj.

Intended and performed are the same here: the recurrence needs D x N multiply-adds per token for its
read-out, and the loop runs exactly those, one token at a time (sequential in T; the mamba-ssm
kernel runs the same arithmetic in one fused, parallel-over-channels pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core

# Mixers that run transformers' `mamba_selective_scan` with one (D x N) state per sequence, by class
# name: the cost below is checked against FlopCounterMode on that function and on each family's
# tiny build. zamba's ZambaMambaMixer runs it per Mamba head with raw per-head x_proj / dt_proj
# parameters, and stays refused (arch/coverage.py).
SCAN_MIXERS = frozenset({"MambaMixer", "FalconMambaMixer", "JambaMambaMixer"})

# The mixer's nn.Linear children whose forward reads only `.weight` (`self.dt_proj.weight @
# time_step`): costed as GEMMs, never adaptable by LoRA.
WEIGHT_ONLY = frozenset({"dt_proj"})
# The mixer's 2-D parameters used elementwise, no GEMM: A_log (D x N) enters as exp(A * dt).
ELEMENTWISE = frozenset({"A_log"})


@dataclass(kw_only=True, frozen=True, slots=True)
class SelectiveScan(Core):
    """Mamba-1's selective scan over `channels` (D) channels with a `state`-wide (N) state each, read
    out once per token; before it a depthwise causal convolution of `conv_kernel` taps over
    `conv_channels` channels. Reads one node as q, k and v alike (`selective_scan_flops`)."""

    channels: int
    state: int
    conv_channels: int
    conv_kernel: int


def selective_scan_flops(scan: SelectiveScan, length: int) -> tuple[float, float]:
    """Forward FLOPs of one sequence of `length` tokens through a Mamba-1 mixer: (the scan, the
    causal convolution). The scan: `mamba_selective_scan`'s recurrent loop runs one
    `torch.matmul(ssm_state, C[:, t])` per token, (D x N) @ (N x 1): 2 x D x N x T; everything
    else in it is elementwise. The convolution (`causal_conv1d_fn`): K taps per channel on T + K - 1
    output positions (F.conv1d pads K - 1 on both sides before the slice to T)."""
    if length <= 0:
        return 0.0, 0.0
    core = 2.0 * scan.channels * scan.state * length
    conv = 2.0 * scan.conv_channels * scan.conv_kernel * (length + scan.conv_kernel - 1)
    return core, conv


def selective_scan_costs(scan: Any, length: int) -> tuple[float, float, float]:
    """(forward scan, forward convolution, backward scan): every read-out matmul gets both input
    gradients (the state's and C's: 4 x D x N per token). The state at step 0 is the zero state times
    exp(A dt) plus dt B x, so it needs a gradient too: no step is exempt."""
    f, c = selective_scan_flops(scan, length)
    return f, c, 2.0 * f


def scan_core(mod: Any) -> tuple[AttentionSpec, SelectiveScan]:
    """The geometry and core of a built Mamba-1 mixer module (one of SCAN_MIXERS). The spec's chunk
    is 1: the torch path steps one token at a time."""
    channels, state = int(mod.intermediate_size), int(mod.ssm_state_size)
    conv = mod.conv1d
    core = SelectiveScan(
        q="q",
        k="k",
        v="v",
        dst="attn",
        channels=channels,
        state=state,
        conv_channels=int(conv.weight.shape[0]),
        conv_kernel=int(conv.weight.shape[-1]),
    )
    return AttentionSpec(
        kind="linear", window=None, num_heads=1, num_kv_heads=1, head_dim=state, v_head_dim=channels, chunk=1
    ), core


_SCAN_PATHS = (
    "{count} Mamba-1 layers ({label}, selective scan): the attention path does not apply to them. "
    "transformers runs mamba-ssm's mamba_inner_fn (training without a cache: convolution, x_proj, "
    "dt_proj, scan and out_proj fused) or selective_scan_fn, and causal-conv1d's causal_conv1d_fn, "
    "where the kernels hub or the mamba-ssm / causal-conv1d packages provide them (CUDA); else the "
    "torch fallback: a depthwise F.conv1d and mamba_selective_scan's loop over the time steps, "
    "sequential in T (one (D x N) @ (N x 1) read-out per token){packed}"
)
_SCAN_PACKED = (
    "; this batch is packed, and the torch fallback ignores document boundaries, so its documents "
    "share one recurrent state and one convolution window"
)


def selective_scan_note(count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's line for `count` Mamba-1 layers of geometry `label`."""
    return _SCAN_PATHS.format(count=count, label=label, packed=_SCAN_PACKED if packed else "")
