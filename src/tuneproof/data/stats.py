"""Statistics of a batch plan: what padding costs and whether accumulation windows still mix.

For a list of micro-batches (index arrays into `lengths`), in the order they run:
- padding_fraction: pad slots / all slots, each micro-batch padded to its own longest member;
- zero_pad_share: share of micro-batches whose members all have one length (no padding at all,
  which puts global layers back on SDPA's is_causal path);
- roots_per_window: distinct root documents per gradient-accumulation window (grad_accum
  consecutive micro-batches), averaged over windows; None without root ids;
- length_mix: standard deviation of log2(length) over the sequences of a window, averaged over
  windows: how much a window mixes lengths (a length-homogeneous window scores ~0).
`random_plan` gives the baseline these are compared against: a uniform shuffle in micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class PlanStats:
    num_batches: int
    padding_fraction: float
    zero_pad_share: float
    roots_per_window: float | None
    length_mix: float

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "num_batches": self.num_batches,
            "padding_fraction": self.padding_fraction,
            "zero_pad_share": self.zero_pad_share,
            "roots_per_window": self.roots_per_window,
            "length_mix": self.length_mix,
        }


def plan_stats(
    batches: Sequence[np.ndarray],
    lengths: np.ndarray,
    roots: np.ndarray | None = None,
    grad_accum: int = 1,
    capacity: int | None = None,
) -> PlanStats:
    """Stats of a plan. `capacity`: packed rows of a fixed token capacity (padding = unused capacity)."""
    sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
    flat = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ls = lengths[flat]
    real = float(ls.sum())
    mx = np.maximum.reduceat(ls, starts)
    mn = np.minimum.reduceat(ls, starts)
    if capacity is not None:
        slots = float(capacity) * len(batches)
        zero = np.add.reduceat(ls, starts) == capacity
    else:
        slots = float((mx * sizes).sum())
        zero = mx == mn
    window = np.repeat(np.arange(len(batches)) // grad_accum, sizes)
    num_windows = int(window[-1]) + 1 if window.size else 0
    roots_pw = None
    if roots is not None and num_windows:
        r = roots[flat].astype(np.int64)
        pairs = window * (int(r.max()) + 1) + r
        roots_pw = float(np.unique(pairs).size / num_windows)
    x = np.log2(ls.astype(np.float64))
    cnt = np.bincount(window, minlength=num_windows)
    s1 = np.bincount(window, weights=x, minlength=num_windows)
    s2 = np.bincount(window, weights=x * x, minlength=num_windows)
    var = np.maximum(s2 / cnt - (s1 / cnt) ** 2, 0.0)
    return PlanStats(
        len(batches),
        1.0 - real / slots if slots else 0.0,
        float(zero.mean()) if len(batches) else 0.0,
        roots_pw,
        float(np.sqrt(var).mean()) if num_windows else 0.0,
    )


def random_plan(n: int, micro_batch_size: int, seed: int = 0) -> list[np.ndarray]:
    """Uniformly shuffled examples in micro-batches: the padding and mixing baseline."""
    order = np.random.default_rng([seed, 1]).permutation(n)
    full = n // micro_batch_size
    out = list(order[: full * micro_batch_size].reshape(full, micro_batch_size)) if full else []
    if n % micro_batch_size:
        out.append(order[full * micro_batch_size :])
    return out


def hf_length_grouped_plan(
    lengths: np.ndarray, micro_batch_size: int, grad_accum: int, seed: int = 0
) -> list[np.ndarray]:
    """What HF Trainer's group_by_length does: `get_length_grouped_indices` with
    batch_size = train_batch_size * gradient_accumulation_steps, then micro-batches in that order."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    g = torch.Generator().manual_seed(seed)
    order = np.asarray(
        get_length_grouped_indices(lengths.tolist(), micro_batch_size * grad_accum, generator=g)
    )
    full = order.size // micro_batch_size
    out = list(order[: full * micro_batch_size].reshape(full, micro_batch_size)) if full else []
    if order.size % micro_batch_size:
        out.append(order[full * micro_batch_size :])
    return out
