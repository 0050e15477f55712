"""Attention pair counts: which (query, key) pairs an attention path computes.

Convention: a "pair" is one (query, key) score. Per pair and head the forward does QK^T
(2*head_dim FLOPs) and AV (2*v_head_dim FLOPs). Counts are per sequence; a batch sums them.

- intended: the pairs the architecture specifies, on real tokens only: causal T(T+1)/2;
  sliding (window W, query sees itself and W-1 earlier keys) W(W+1)/2 + (T-W)W for T >= W.
- performed, by path (transformers 5.x + PyTorch 2.x behaviour, see
  ../shared/references/attention-dispatch.md):
  - eager: matmul over the full padded T x T square, mask added afterwards.
  - sdpa: transformers materialises a mask when the batch has padding or a sliding layer has
    kv_length >= window (`masking_utils._ignore_causal_mask_sdpa`); with a mask the kernel computes
    the full square. Otherwise SDPA gets is_causal and computes the causal triangle (tile
    granularity of the fused kernel not modelled).
  - flash_attention_2: varlen on real tokens with the window native: the intended pairs (tile
    granularity not modelled).
  - flex_attention: every (q-block, kv-block) of the BlockMask that holds at least one allowed pair
    is computed whole (block size 128, torch's `_DEFAULT_SPARSE_BLOCK_SIZE`); transformers' padding
    mask_mod masks keys only, so pad query rows still attend to real keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ATTN_PATHS = ("eager", "sdpa", "flash_attention_2", "flex_attention")
FLEX_BLOCK = 128  # torch.nn.attention.flex_attention._DEFAULT_SPARSE_BLOCK_SIZE


def intended_pairs(length: int, window: int | None) -> int:
    """Exact causal (window None) or causal sliding-window pair count for one sequence."""
    if length <= 0:
        return 0
    if window is None or length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


def flex_block_pairs(width: int, length: int, window: int | None, block: int = FLEX_BLOCK) -> int:
    """Pairs inside BlockMask blocks that hold at least one allowed (q, k) pair.

    Allowed: k <= q, q - k < window (sliding), k < length (keys past the real length are padding).
    A block [q0, q1] x [k0, k1] (clipped to the width, keys clipped to the length) is non-empty iff the
    q - k range [q0 - k1, q1 - k0] meets [0, window - 1]. Blocks are counted whole within the width.
    """
    if length <= 0:
        return 0
    starts = np.arange(0, width, block, dtype=np.int64)
    ends = np.minimum(starts + block, width) - 1  # inclusive
    q0, q1 = starts[:, None], ends[:, None]
    k0 = starts[None, :]
    k1_real = np.minimum(ends, length - 1)[None, :]
    nonempty = (k0 < length) & (q1 - k0 >= 0)
    if window is not None:
        nonempty &= q0 - k1_real <= window - 1
    sizes = (ends - starts + 1).astype(np.int64)
    area = sizes[:, None] * sizes[None, :]
    return int((area * nonempty).sum())


@dataclass(frozen=True, slots=True)
class PathPairs:
    """Performed pairs for one layer kind over a batch, and why they differ from intended."""

    pairs: int
    mask_materialised: bool
    why: str


def performed_pairs(path: str, width: int, lengths: list[int], window: int | None) -> PathPairs:
    """Pairs the `path` computes for a batch padded to `width` with real `lengths`."""
    padded = any(n < width for n in lengths)
    sliding = window is not None
    if path == "eager":
        return PathPairs(
            len(lengths) * width * width,
            True,
            f"eager attention computes the full {width}x{width} score matrix and masks it afterwards",
        )
    if path == "sdpa":
        window_forces = sliding and window is not None and width >= window
        if padded or window_forces:
            causes = []
            if window_forces:
                causes.append(f"kv_length {width} >= window {window}")
            if padded:
                causes.append("the batch has padding")
            return PathPairs(
                len(lengths) * width * width,
                True,
                "mask materialised (" + " and ".join(causes) + "): SDPA gets an explicit mask, "
                f"loses is_causal and computes the full {width}x{width} square",
            )
        return PathPairs(len(lengths) * intended_pairs(width, None), False, "is_causal: the causal triangle")
    if path == "flash_attention_2":
        return PathPairs(
            sum(intended_pairs(n, window) for n in lengths),
            False,
            "varlen kernel on real tokens, window and causal skip native",
        )
    if path == "flex_attention":
        return PathPairs(
            sum(flex_block_pairs(width, n, window) for n in lengths),
            False,
            f"flex computes whole {FLEX_BLOCK}x{FLEX_BLOCK} BlockMask blocks that touch the mask"
            + (", pad query rows included" if padded else ""),
        )
    raise ValueError(f"unknown attention path {path!r}; expected one of {', '.join(ATTN_PATHS)}")
