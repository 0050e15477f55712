"""xLSTM's mLSTM cell (model type xlstm) as transformers' native torch backend computes it, the path
it takes when the `xlstm` package (its Triton kernels) is not installed.

Legend: T tokens of one sequence, C the chunk (`chunk_size`), H heads, dk the query/key head width
(`qk_dim_factor` x hidden / H), dv the value head width, c the number of chunks the kernel runs,
r the tokens left to the per-step loop.

What runs (transformers 5.x models/xlstm/modeling_xlstm.py, `xLSTMLayer.forward`): the projections
q, k, v, ogate_preact, igate_preact, fgate_preact (nn.Linear), then `xLSTMBackend.forward`, by the
config's `mode`:
- "inference" (the default, in training too): `wrap_chunkwise_arbitrary_sequence_length` runs
  `mlstm_chunkwise_native_autograd` on the first c = floor(T / C) whole chunks and
  `mlstm_recurrent_sequence_native`, a Python loop of `mlstm_recurrent_step_native`, on the last
  r = T - c C tokens (its docstring promises halved chunks for the rest; the code does not);
- "train": `mlstm_chunkwise_native_autograd` on all of T (transformers raises unless C divides T);
- "train_with_padding": `wrap_chunkwise_pad_zeros` pads T up to whole chunks of 64 tokens (the
  wrapper's own `chunk_size` default, which overrides the config's) and runs the chunkwise kernel
  on them.
Then the multi-head norm, the output gate (elementwise) and out_proj.

Matmuls, per head (the rest is elementwise: gates, exp, max, the stabilisers; not counted, as
FlopCounterMode does not count them):
- per chunk, `mlstm_chunkwise_recurrent_fw_C`: K_gated^T @ V (C x dk x dv); and
  `mlstm_chunkwise_parallel_fw_H`: Q @ K^T (C x C x dk), Q_gated @ C_state (C x dk x dv),
  M @ V (C x C x dv), Q_gated @ n_state (C x dk x 1);
- per step of the loop: k v^T (dk x 1 x dv), q @ C (1 x dk x dv), q @ n (1 x dk x 1).
Backward: every one of these matmuls gets both input gradients (checked against FlopCounterMode:
exactly twice the forward), the zero initial state included (its chunk states are written into one
buffer that requires a gradient as a whole).

Intended and performed are the same: the cost is what the configured backend runs, the zero rows
of "train_with_padding" included (the model defines its computation by that mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch.shape import AttentionSpec, Core

# mLSTM layers that run `xLSTMBackend`'s native torch kernels, by class name (transformers defines
# them only when the `xlstm` package is absent; with it, xlstm's own mLSTMBlock is built instead).
MLSTM_MIXERS = frozenset({"xLSTMLayer"})
# `wrap_chunkwise_pad_zeros(chunk_size=64)`: the chunk "train_with_padding" pads to and runs with
PAD_CHUNK = 64
MODES = ("inference", "train", "train_with_padding")


@dataclass(kw_only=True, frozen=True, slots=True)
class MLstm(Core):
    """The mLSTM cell over `heads` heads with a (key_dim x value_dim) matrix memory each, in chunks of
    `chunk` tokens (64 under "train_with_padding"); `mode` is the config's backend mode (see the
    module docstring), which decides how a length that is not a whole number of chunks runs
    (`mlstm_flops`). Reads q, k, v (and the gates, joined into them)."""

    heads: int
    key_dim: int
    value_dim: int
    chunk: int
    mode: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"MLstm.mode must be one of {MODES}, got {self.mode!r}")


def mlstm_pieces(core: MLstm, length: int) -> tuple[int, int]:
    """(chunks the chunkwise kernel runs, tokens left to the per-step loop)."""
    if core.mode == "inference":
        return length // core.chunk, length % core.chunk
    return -(-length // core.chunk), 0


def mlstm_flops(core: MLstm, length: int) -> float:
    """Forward matmul FLOPs of one sequence of `length` tokens through an mLSTM cell: per head,
    2 x (C^2 x (dk + dv) + 2 x C x dk x dv + C x dk) per chunk and 2 x (2 x dk x dv + dk) per step
    of the loop (the matmuls listed in the module docstring)."""
    if length <= 0:
        return 0.0
    chunks, steps = mlstm_pieces(core, length)
    c, dk, dv = core.chunk, core.key_dim, core.value_dim
    per_chunk = 2.0 * (c * c * (dk + dv) + 2 * c * dk * dv + c * dk)
    per_step = 2.0 * (2 * dk * dv + dk)
    return core.heads * (chunks * per_chunk + steps * per_step)


def mlstm_costs(core: Any, length: int) -> tuple[float, float, float]:
    """(forward cell, convolution, backward cell): no convolution; the backward runs both input
    gradients of every matmul, 2x the forward."""
    f = mlstm_flops(core, length)
    return f, 0.0, 2.0 * f


def mlstm_core(mod: Any) -> tuple[AttentionSpec, MLstm]:
    """The geometry and core of a built xLSTMLayer (one of MLSTM_MIXERS), read from its config."""
    cfg = mod.config
    heads = int(cfg.num_heads)
    dk, dv = int(mod.qk_dim) // heads, int(mod.v_dim) // heads
    mode = str(cfg.mode)
    chunk = PAD_CHUNK if mode == "train_with_padding" else int(cfg.chunk_size)
    core = MLstm(
        q="q", k="k", v="v", dst="attn", heads=heads, key_dim=dk, value_dim=dv, chunk=chunk, mode=mode
    )
    return AttentionSpec(
        kind="linear",
        window=None,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=dk,
        v_head_dim=dv,
        chunk=chunk,
    ), core


_MLSTM_PATHS = (
    "{count} mLSTM layers ({label}, xLSTM): the attention path does not apply to them. With the `xlstm` "
    "package installed transformers builds xlstm's own mLSTMBlock (its Triton chunkwise kernels); "
    "without it, the native torch backend in mode {mode!r}: {how}{packed}"
)
_MLSTM_HOW = {
    "inference": "mlstm_chunkwise_native_autograd on the whole chunks, then a per-token Python loop "
    "(mlstm_recurrent_step_native) on the rest",
    "train": "mlstm_chunkwise_native_autograd on the whole sequence (the length must be a multiple of "
    "the chunk, else transformers raises)",
    "train_with_padding": "mlstm_chunkwise_native_autograd on the sequence zero-padded to whole chunks "
    "of 64 tokens",
}
_MLSTM_PACKED = (
    "; this batch is packed, and the backend takes no document boundaries, so its documents share one state"
)


def mlstm_note(core: MLstm, count: int, label: str, packed: bool) -> str:
    """The dispatch explainer's line for `count` mLSTM layers."""
    return _MLSTM_PATHS.format(
        count=count,
        label=label,
        mode=core.mode,
        how=_MLSTM_HOW[core.mode],
        packed=_MLSTM_PACKED if packed else "",
    )
